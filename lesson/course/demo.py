"""The lesson's demo: three deliberately broken networks and a healthy one, diagnosed.

Same bugs as the lesson's "Build it, step 5" (learning rate 10, dead ReLUs from a -1/-5
initialisation, a missing zero_grad()) and the same healthy baseline, followed by the
overfit-one-batch test, the learning-rate range test and the gradient check. The difference is
the verdicts: the debugger here names each bug and leaves the healthy network clean.

Run it with `python -m lesson` or `nndebug demo`.
"""
from __future__ import annotations

import argparse
import time
from typing import Callable

import torch
from torch import nn

from lesson.findings import Finding
from lesson.debugger.monitor import NetworkDebugger

#: The bug each broken network must be diagnosed with (the demo's test asserts these).
EXPECTED: dict[str, str | None] = {
    "lr_too_high": "LR_TOO_HIGH",
    "dead_relus": "DEAD_NEURONS",
    "missing_zero_grad": "MISSING_ZERO_GRAD",
    "healthy": None,
}


def _banner(title: str) -> None:
    print("\n" + "=" * 60 + f"\n{title}\n" + "=" * 60)


def _mlp(*widths: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
           y: torch.Tensor, steps: int, zero_grad: bool = True,
           verbose: bool = True) -> list[Finding]:
    """Train under the debugger and return its diagnosis (the report is printed)."""
    with NetworkDebugger(model, optimizer, nn.CrossEntropyLoss()) as debugger:
        criterion = debugger.criterion
        assert criterion is not None
        for _ in range(steps):
            if zero_grad:
                optimizer.zero_grad()
            loss = criterion(model(x), y)
            debugger.record_loss(loss.detach())     # no host sync: read when the report needs it
            loss.backward()
            optimizer.step()
        if verbose:
            debugger.print_report()
        return debugger.diagnose()


def _dead_init(model: nn.Module) -> nn.Module:
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.fill_(-1.0)
                m.bias.fill_(-5.0)
    return model


def demo_broken_networks(verbose: bool = True) -> dict[str, list[Finding]]:
    """Run the lesson's demo; returns each network's findings (printed as it goes)."""
    show: Callable[[str], None] = _banner if verbose else (lambda title: None)
    torch.manual_seed(42)
    x = torch.randn(64, 10)
    y = (x[:, 0] > 0).long()
    results: dict[str, list[Finding]] = {}

    show("BUG 1: Learning rate too high (lr=10)")
    model = _mlp(10, 32, 2)
    results["lr_too_high"] = _train(model, torch.optim.SGD(model.parameters(), lr=10.0), x, y,
                                    steps=20, verbose=verbose)

    show("BUG 2: Dead ReLUs from bad initialization (weights -1, biases -5)")
    model = _dead_init(_mlp(10, 32, 32, 2))
    results["dead_relus"] = _train(model, torch.optim.Adam(model.parameters(), lr=1e-3), x, y,
                                   steps=50, verbose=verbose)

    show("BUG 3: Missing zero_grad (gradients accumulate)")
    model = _mlp(10, 32, 2)
    results["missing_zero_grad"] = _train(model, torch.optim.SGD(model.parameters(), lr=0.01),
                                          x, y, steps=50, zero_grad=False, verbose=verbose)

    show("HEALTHY NETWORK: Correct setup for comparison")
    model = _mlp(10, 32, 2)
    results["healthy"] = _train(model, torch.optim.Adam(model.parameters(), lr=1e-3), x, y,
                                steps=50, verbose=verbose)

    if verbose:
        _active_checks(x, y)
        _summary(results)
    return results


def _active_checks(x: torch.Tensor, y: torch.Tensor) -> None:
    """The lesson's three active checks, on fresh healthy models (they restore what they touch)."""
    from lesson.checks.gradcheck import gradient_check
    from lesson.checks.lr_finder import find_learning_rate
    from lesson.checks.overfit import overfit_one_batch

    criterion = nn.CrossEntropyLoss()
    _banner("OVERFIT-ONE-BATCH TEST (healthy model)")
    overfit_one_batch(_mlp(10, 32, 2), x[:8], y[:8], criterion)
    _banner("LEARNING RATE FINDER")
    sweep = find_learning_rate(_mlp(10, 32, 2), x, y, criterion)
    if sweep.suggested_lr is not None:
        print(f"  Why BUG 1's lr=10 was too high though the sweep reached 10 without diverging:\n"
              f"  the sweep arrives at 10 with weights already trained by the smaller rates\n"
              f"  before it, where the loss is flatter; a fresh network started at 10 bounces.\n"
              f"  Start training at the suggestion, {sweep.suggested_lr:.2g} "
              f"({10 / sweep.suggested_lr:.1f}x below 10).")
    _banner("GRADIENT CHECK")
    gradient_check(_mlp(10, 8, 2), x[:4], y[:4], criterion)


def _summary(results: dict[str, list[Finding]]) -> None:
    _banner("SUMMARY: what the debugger found")
    for name, findings in results.items():
        expected = EXPECTED[name]
        codes = list(dict.fromkeys(f.code for f in findings))   # one mention per code
        ok = (expected in codes) if expected else not codes
        verdict = "as expected" if ok else "UNEXPECTED"
        print(f"  {name:<18} {verdict:<12} {', '.join(codes) or 'no findings'}")


# -- nndebug demo --------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    parser.add_argument("--quiet", action="store_true",
                        help="print only the summary line per network")


def run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    results = demo_broken_networks(verbose=not args.quiet)
    if args.quiet:
        for name, findings in results.items():
            print(f"{name}: {', '.join(f.code for f in findings) or 'no findings'}")
    print(f"\n(demo took {time.perf_counter() - start:.1f} s)")
    ok = all((EXPECTED[n] in [f.code for f in fs]) if EXPECTED[n] else not fs
             for n, fs in results.items())
    return 0 if ok else 1
