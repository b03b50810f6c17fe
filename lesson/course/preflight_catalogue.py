"""Run the preflight checklist on the catalogue's broken scripts: which check stops each one?

A case page is a training script, not a (model, data, loss) triple. To hand its pieces to
`preflight`, its script runs with a stand-in for `NetworkDebugger` that records what the script
gives the debugger (the model as first built, the optimizer's settings, the criterion) and the
first batches that reach the loss during training, then stops the script. Preflight then runs on
those pieces with its own, correct loop.

    python -m lesson.course.preflight_catalogue            # the table: case -> first failing check
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import io
import json
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn

from lesson.course.clinic import seed_argument
from lesson.course.preflight import (PreflightReport, inputs_from_factory, load_factory,
                                     preflight)

MAX_CAPTURED_SAMPLES = 1024
"""Stop the script once this many training samples have reached the loss."""


class _Captured(Exception):
    """Raised inside the case's script once enough has been seen."""


def _settings(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's settings that its constructor takes again (AdamW keeps
    `decoupled_weight_decay` in its defaults but refuses it as an argument)."""
    accepted = inspect.signature(type(optimizer).__init__).parameters
    settings = {**optimizer.defaults, "lr": optimizer.param_groups[0]["lr"]}
    return {k: v for k, v in settings.items() if k in accepted}


class _Recorder:
    """Stands in for NetworkDebugger while a case's script runs (see the module's doc)."""

    def __init__(self, model: nn.Module, optimizer: Any = None, criterion: Any = None,
                 **_: Any) -> None:
        self.model = copy.deepcopy(model)
        self.optimizer = optimizer
        self.settings = (_settings(optimizer) if isinstance(optimizer, torch.optim.Optimizer)
                         else None)
        self.loss = criterion
        self.batches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.loss_history: list[float] = []
        self.val_loss_history: list[float] = []
        self.history: list[dict] = []
        self.hooks: list[Any] = []
        self._x: torch.Tensor | None = None
        self._out_shape: torch.Size | None = None
        self.reshape: tuple[int, ...] | None = None   # the script reshapes outputs before the loss
        self.hooks.append(model.register_forward_pre_hook(self._on_input))
        self.hooks.append(model.register_forward_hook(self._on_output))
        if isinstance(criterion, nn.Module):
            self.hooks.append(criterion.register_forward_pre_hook(
                lambda module, args: self._on_loss(*args[:2])))
            self.criterion = criterion
        elif callable(criterion):
            def wrapped(output: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
                self._on_loss(output, target)
                return criterion(output, target, *args, **kwargs)
            self.criterion = wrapped
        else:
            self.criterion = criterion

    def _on_input(self, module: nn.Module, args: tuple) -> None:
        if args and isinstance(args[0], torch.Tensor):
            self._x = args[0]

    def _on_output(self, module: nn.Module, args: tuple, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            self._out_shape = output.shape

    def _on_loss(self, output: Any, target: Any) -> None:
        if not torch.is_grad_enabled() or self._x is None or not isinstance(target, torch.Tensor):
            return                                        # an evaluation pass
        if isinstance(output, torch.Tensor) and self._out_shape is not None \
                and output.shape != self._out_shape and output.numel() == self._out_shape.numel():
            self.reshape = tuple(output.shape[1:])        # e.g. model(x).squeeze(1)
        x, y = self._x.detach().clone(), target.detach().clone()
        self._x = None
        if self.batches and x.shape == self.batches[0][0].shape and torch.equal(x, self.batches[0][0]):
            raise _Captured                               # the data repeats: one full epoch seen
        self.batches.append((x, y))
        if sum(len(b[0]) for b in self.batches) >= MAX_CAPTURED_SAMPLES:
            raise _Captured

    # the parts of NetworkDebugger's API a script may call before it is stopped
    def __enter__(self) -> "_Recorder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove_hooks()

    def remove_hooks(self) -> None:
        for h in self.hooks:
            h.remove()
        self.hooks.clear()

    def record_loss(self, value: Any) -> None:
        self.loss_history.append(float(value))

    def record_val_loss(self, value: Any) -> None:
        self.val_loss_history.append(float(value))

    def diagnose(self) -> list:
        return []

    def snapshot(self) -> None:
        return None

    def add_callback(self, fn: Callable) -> None:
        pass

    def print_report(self) -> None:
        pass

    def optimizer_factory(self) -> Callable | None:
        """The script's optimizer class and settings, for fresh parameters."""
        if self.settings is None:
            return None
        kind, settings = type(self.optimizer), dict(self.settings)
        return lambda params: kind(params, **settings)


#: tools a script may call with (model, x, y, criterion) after training: when the script gives
#: its debugger no criterion, these calls tell us the loss and the data
_TOOLS = {"locate_nonfinite": "lesson.data.nonfinite", "overfit_one_batch": "lesson.checks.overfit"}


@contextlib.contextmanager
def _recording() -> Iterator[tuple[list[_Recorder], list[tuple]]]:
    """Swap NetworkDebugger (and the tools above) for recorders while a script runs."""
    import importlib

    import lesson

    made: list[_Recorder] = []
    calls: list[tuple] = []

    def make(*args: Any, **kwargs: Any) -> _Recorder:
        made.append(_Recorder(*args, **kwargs))
        return made[-1]

    def tool(real: Callable) -> Callable:
        def record(model: Any, x: Any = None, y: Any = None, criterion: Any = None, *a: Any,
                   **k: Any) -> Any:
            calls.append((x, y, criterion))
            return real(model, x, y, criterion, *a, **k)
        return record

    swaps = [(lesson, "NetworkDebugger", make),
             (importlib.import_module("lesson.debugger.monitor"), "NetworkDebugger", make)]
    for name, module in _TOOLS.items():
        real = getattr(importlib.import_module(module), name)
        swaps += [(lesson, name, tool(real)), (importlib.import_module(module), name, tool(real))]
    saved = [(owner, name, owner.__dict__.get(name)) for owner, name, _ in swaps]
    for owner, name, value in swaps:
        setattr(owner, name, value)
    try:
        yield made, calls
    finally:
        for owner, name, value in saved:
            if value is None:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


@dataclass
class CaseInputs:
    """What preflight needs, taken from a case's broken (or fixed) script."""

    model: nn.Module
    data: Any
    criterion: Callable
    options: dict[str, Any]


def inputs_from_case(name: str, seed: int = 0, which: str = "broken") -> CaseInputs | None:
    """The model, data, loss and optimizer settings of a case's script, or None when the script
    does not train under a NetworkDebugger (its tool is another check)."""
    from broken_models import get_case

    case = get_case(name)
    train = {"broken": case.train_broken, "fixed": case.train_fixed}[which]
    with _recording() as (made, calls), warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.manual_seed(seed)
        try:
            train(seed)
        except _Captured:
            pass
        finally:
            for rec in made:
                rec.remove_hooks()
    rec = next((r for r in made if r.batches), None)
    if rec is None:
        found = [c for c in calls if isinstance(c[0], torch.Tensor) and callable(c[2])]
        if not made or not found:
            return None
        rec = made[0]
        x, y, rec.loss = found[0]
        rec.batches = [(x.detach().clone(), y.detach().clone())]
    options: dict[str, Any] = {"batch_size": len(rec.batches[0][0])}
    factory = rec.optimizer_factory()
    if factory is not None:
        options["optimizer_factory"] = factory
    data = rec.batches[0] if len(rec.batches) == 1 else rec.batches
    criterion = rec.criterion if rec.loss is None else rec.loss
    model = rec.model if rec.reshape is None else _Reshaped(rec.model, rec.reshape)
    return CaseInputs(model, data, criterion, options)


class _Reshaped(nn.Module):
    """The script's model followed by the reshape the script applies before the loss."""

    def __init__(self, model: nn.Module, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.model, self.shape = model, shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x)
        return out.reshape(out.shape[0], *self.shape)


def preflight_case(name: str, seed: int = 0, which: str = "broken",
                   **kwargs: Any) -> PreflightReport | None:
    """Preflight on a case's pieces; None when the case's script cannot be captured."""
    inputs = inputs_from_case(name, seed, which)
    if inputs is None:
        return None
    return preflight(inputs.model, inputs.data, inputs.criterion,
                     **(inputs.options | {"seed": seed} | kwargs))


def catalogue_table(seed: int = 0, label_signal: bool = True) -> list[tuple[str, str, str]]:
    """(case, first failing check or 'passes' / 'not captured', codes found) per case."""
    from broken_models import CATALOGUE

    rows = []
    for name in CATALOGUE:
        try:
            report = preflight_case(name, seed, label_signal=label_signal)
        except Exception as err:  # a tool that breaks on a case is a result to show, too
            rows.append((name, f"error: {type(err).__name__}: {err}", ""))
            continue
        if report is None:
            rows.append((name, "not captured", ""))
        elif report.failed is None:
            rows.append((name, "passes", ""))
        else:
            failed = report.failed
            codes = ", ".join(dict.fromkeys(f.code for f in failed.findings))
            rows.append((name, f"{failed.number}. {failed.title}", codes))
    return rows


# `nndebug preflight`: a factory of the user's (`file.py:build`) or a catalogue case.
def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("factory", nargs="?",
                        help="path/to/file.py:function returning (model, data, loss)")
    source.add_argument("--case", help="a catalogue case: preflight on its broken script's pieces")
    parser.add_argument("--fixed", action="store_true", help="with --case: the fixed script")
    parser.add_argument("--steps", type=int, default=60, help="steps of the short training")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=seed_argument, default=0)
    parser.add_argument("--samples", type=Path, default=Path(".nndebug/preflight-samples.png"),
                        help="where to save the picture of five samples (images only)")
    parser.add_argument("--all", action="store_true", help="run every check, even after a failure")
    parser.add_argument("--label-signal", action="store_true",
                        help="also check that the labels carry signal (two short trainings)")
    parser.add_argument("--json", type=Path, help="save the result as JSON")
    parser.add_argument("--report-json", type=Path,
                        help="save the findings in nndebug report's format")


def run(args: argparse.Namespace) -> int:
    try:
        if args.case:
            inputs = inputs_from_case(args.case, args.seed, "fixed" if args.fixed else "broken")
            if inputs is None:
                raise ValueError(f"case {args.case!r} does not train under a NetworkDebugger")
            model, data, criterion, options = (inputs.model, inputs.data, inputs.criterion,
                                               inputs.options)
        else:
            model, data, criterion, options = inputs_from_factory(load_factory(args.factory))
        options = {"train_steps": args.steps, "batch_size": args.batch_size, "seed": args.seed,
                   "samples_path": args.samples, "stop_at_first_failure": not args.all,
                   "label_signal": args.label_signal} | options
        report = preflight(model, data, criterion, **options)
    except (TypeError, ValueError) as err:
        print(f"nndebug preflight: {err}", file=sys.stderr)
        return 2
    print(report)
    if args.json:
        args.json.write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")
    if args.report_json:
        from lesson.course.report import save_report

        save_report(report.to_report(title=args.factory or args.case), args.report_json)
    return 0 if report.passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lesson.course.preflight_catalogue",
                                     description="preflight on every catalogue case")
    parser.add_argument("--seed", type=seed_argument, default=0)
    parser.add_argument("--no-label-signal", action="store_true",
                        help="skip the label check (two short trainings per case reaching it)")
    args = parser.parse_args(argv)
    print("| case | first failing check | codes |\n|---|---|---|")
    for name, check, codes in catalogue_table(args.seed, not args.no_label_signal):
        print(f"| {name} | {check} | {codes} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
