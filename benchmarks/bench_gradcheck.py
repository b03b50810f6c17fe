"""Gradient checks side by side: who finds injected backward bugs, who names the culprit, and
at what cost in forward passes.

Methods:
  lesson      the lesson's gradient_check, re-implemented faithfully here (float64, the first 5
              elements of each tensor, one at a time; MISMATCH above 1e-5)
  ours        lesson.gradient_check_report (every element, one random direction per tensor)
  gc-fast     torch.autograd.gradcheck(fast_mode=True) over the parameters as inputs
  gc-slow     torch.autograd.gradcheck(fast_mode=False): the full Jacobian, element by element

Bugs are injected into the backward of a square BuggyLinear(8, 8) in
Linear(10,8)-ReLU-BuggyLinear(8,8)-ReLU-Linear(8,2); "detected" = the method reports a failure,
"named" = it names exactly the tensor whose gradient is wrong ("2.weight", or "2.bias"; for
sign_input, the two tensors of layer 0 that receive the wrong gradient). False alarms are
counted on correct models (the same architecture without bugs, and deeper ReLU MLPs).

    .venv/bin/python benchmarks/bench_gradcheck.py
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.autograd.gradcheck import GradcheckError
from torch.func import functional_call

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lesson.checks.gradcheck import gradient_check_report  # noqa: E402
from lesson.checks.injected_bugs import BUGS, BuggyLinear  # noqa: E402

SEEDS = 10
CE = nn.CrossEntropyLoss()


class Counter:
    def __init__(self, model: nn.Module):
        self.calls = 0
        model.register_forward_pre_hook(self._hook)

    def _hook(self, *_):
        self.calls += 1


def lesson_method(model, x, y, eps=1e-4):
    """The lesson's algorithm on a float64 copy: returns (failing names, forward passes)."""
    import copy

    model = copy.deepcopy(model).double()
    counter = Counter(model)
    x, failing = x.double(), []
    for name, param in model.named_parameters():
        model.zero_grad()
        CE(model(x), y).backward()
        analytical = param.grad.clone().view(-1)
        flat = param.data.view(-1)
        worst = 0.0
        for i in range(min(5, flat.numel())):
            orig = flat[i].item()
            flat[i] = orig + eps
            with torch.no_grad():
                plus = CE(model(x), y).item()
            flat[i] = orig - eps
            with torch.no_grad():
                minus = CE(model(x), y).item()
            flat[i] = orig
            num, ana = (plus - minus) / (2 * eps), analytical[i].item()
            worst = max(worst, abs(num - ana) / max(abs(num), abs(ana), 1e-8))
        if worst >= 1e-5:
            failing.append(name)
    return failing, counter.calls


def ours(model, x, y):
    report = gradient_check_report(model, x, y, CE)
    return report.failing, report.forward_passes


def autograd_gradcheck(model, x, y, fast):
    import copy

    model = copy.deepcopy(model).double()
    counter = Counter(model)
    names = [n for n, _ in model.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    x = x.double()

    def f(*ps):
        return CE(functional_call(model, dict(zip(names, ps)), (x,)), y)

    try:
        torch.autograd.gradcheck(f, params, fast_mode=fast)
        return [], counter.calls
    except GradcheckError as err:
        found = re.search(r"respect to input (\d+)", str(err))
        return ([names[int(found.group(1))]] if found else ["?"]), counter.calls


METHODS = {
    "lesson": lesson_method,
    "ours": ours,
    "gc-fast": lambda m, x, y: autograd_gradcheck(m, x, y, fast=True),
    "gc-slow": lambda m, x, y: autograd_gradcheck(m, x, y, fast=False),
}
EXPECTED = {bug: ["2.weight"] for bug in BUGS} | {"factor2_bias": ["2.bias"],
                                                  "sign_input": ["0.weight", "0.bias"]}


def buggy(bug, seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, 8), nn.ReLU(), BuggyLinear(8, 8, bug), nn.ReLU(),
                         nn.Linear(8, 2))


def main() -> None:
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 10, generator=g)
    y = torch.randint(0, 2, (16,), generator=g)

    print("Forward passes on the issue's model Linear(10,8)-ReLU-Linear(8,2) (106 elements), "
          "batch 4:")
    torch.manual_seed(0)
    lesson_model = nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 2))
    covered = {"lesson": 5 + 5 + 5 + 2, "ours": 106, "gc-fast": 106, "gc-slow": 106}
    for name, method in METHODS.items():
        failing, calls = method(lesson_model, x[:4], y[:4])
        print(f"  {name:<8} {calls:>4} forward passes, {covered[name]:>3} of 106 elements "
              f"covered, {'PASS' if not failing else 'FAIL ' + str(failing)}")

    print(f"\nInjected backward bugs ({SEEDS} seeds each): detected / named right; "
          "mean forward passes")
    header = f"  {'bug':<18}" + "".join(f"{m:>20}" for m in METHODS)
    print(header)
    totals = {m: [0, 0, 0] for m in METHODS}
    for bug in BUGS:
        cells = []
        for name, method in METHODS.items():
            det = named = calls = 0
            for seed in range(SEEDS):
                failing, c = method(buggy(bug, seed), x, y)
                det += bool(failing)
                named += failing == EXPECTED[bug]
                calls += c
            totals[name][0] += det
            totals[name][1] += named
            totals[name][2] += calls
            cells.append(f"{det:>2}/{named:>2}; {calls / SEEDS:>6.0f} fw")
        print(f"  {bug:<18}" + "".join(f"{c:>20}" for c in cells))
    n = SEEDS * len(BUGS)
    print(f"  {'detection rate':<18}" + "".join(f"{totals[m][0] / n:>20.0%}" for m in METHODS))
    print(f"  {'named right':<18}" + "".join(f"{totals[m][1] / n:>20.0%}" for m in METHODS))

    print("\nFalse alarms on correct models (ReLU kinks included):")
    alarms = {m: 0 for m in METHODS}
    runs = 0
    for seed in range(SEEDS):
        torch.manual_seed(seed)
        for model in (buggy(None, seed),
                      nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                                    nn.Linear(32, 2))):
            runs += 1
            for name, method in METHODS.items():
                if name == "gc-slow" and seed >= 3:
                    continue  # ~2,500 passes per deep model: three seeds are enough
                alarms[name] += bool(method(model, x, y)[0])
    print("  " + ", ".join(f"{m}: {alarms[m]}/{runs if m != 'gc-slow' else 6}"
                           for m in METHODS))
    print(f"\n(total time {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
