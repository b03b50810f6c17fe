"""`nndebug report`: turn a debugger report into the diagnosis prompt, ready to paste.

A *report* is a plain dict that can be saved as JSON and read back (format "nndebug-report",
version 1):

    {
      "format": "nndebug-report", "version": 1,
      "title": str,                       # what was trained
      "symptom": str | None,              # what the user saw, in their words
      "findings": [Finding.to_dict(), ...],
      "loss_history": [float, ...],       # training loss per recorded step
      "val_loss_history": [float, ...],   # validation loss per evaluation
      "history": [record, ...],           # NetworkDebugger.history (see lesson.debugger.monitor)
      "metrics": {name: number | list},   # whatever the run measured
      "code": str | None,                 # the training code
    }

Only "format", "version" and "findings" are required. Non-finite numbers are written as NaN,
Infinity and -Infinity, as Python's json module does. A report comes from a live debugger
(`report_from_debugger`), from a case of the catalogue (`report_from_case`: the broken script's
run, with its symptom and code but not its answer), or from a saved file (`load_report`).
`render_prompt` puts it under `outputs/prompt-nn-debugger.md`. Nothing here touches the network.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from lesson.course.artifacts import OUTPUTS, PROMPT
from lesson.course.clinic import seed_argument
from lesson.findings import Finding, sort_findings

FORMAT = "nndebug-report"
VERSION = 1
#: how many points of a loss curve the rendered report shows
CURVE_POINTS = 20


def make_report(findings: list[Finding], *, title: str = "a training run",
                symptom: str | None = None, loss_history: list[float] | None = None,
                val_loss_history: list[float] | None = None, history: list[dict] | None = None,
                metrics: dict[str, Any] | None = None, code: str | None = None) -> dict[str, Any]:
    """Assemble a report dict from its parts (the findings must be `Finding` objects)."""
    for f in findings:
        if not isinstance(f, Finding):
            raise TypeError(f"findings must be lesson.Finding objects, got {type(f).__name__}")
    return {
        "format": FORMAT, "version": VERSION, "title": title, "symptom": symptom,
        "findings": [f.to_dict() for f in sort_findings(list(findings))],
        "loss_history": [_number(v) for v in loss_history or []],
        "val_loss_history": [_number(v) for v in val_loss_history or []],
        "history": list(history or []),
        "metrics": dict(metrics or {}),
        "code": code,
    }


def _number(value: Any) -> float:
    """A float from a float, int or 0-dim tensor (record_loss may keep tensors)."""
    return float(value.item() if hasattr(value, "item") else value)


def report_from_debugger(debugger: Any, **parts: Any) -> dict[str, Any]:
    """A report of what a `NetworkDebugger` saw: its diagnosis, curves and statistics."""
    return make_report(
        list(debugger.diagnose()), loss_history=list(debugger.loss_history),
        val_loss_history=list(getattr(debugger, "val_loss_history", [])),
        history=list(getattr(debugger, "history", [])), **parts)


def report_from_case(name: str, seed: int = 0) -> dict[str, Any]:
    """Run the broken script of catalogue case `name` and report it as a user would: the
    symptom, the code, the curves and findings; never the case's name, title, expected codes or
    fix, which would hand the assistant the answer."""
    from broken_models import get_case

    case = get_case(name)
    run = case.run_broken(seed)
    metrics = {k: v for k, v in run.metrics.items() if _plain(v)}
    debugger = run.debugger
    losses = metrics.pop("losses", None)
    if losses is None and debugger is not None:
        losses = list(debugger.loss_history)
    return make_report(
        run.findings, title=f"a training script (seed {seed})",   # its name would give it away
        symptom=case.symptom, loss_history=losses, metrics=metrics,
        val_loss_history=list(getattr(debugger, "val_loss_history", []) or []),
        history=list(getattr(debugger, "history", []) or []), code=case.source("broken"))


def _plain(value: Any) -> bool:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return True
    return isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value)


def save_report(report: dict[str, Any], path: str | Path) -> None:
    validate_report(report)
    Path(path).write_text(json.dumps(report, indent=1, default=_json_default), encoding="utf-8")


def _json_default(value: Any) -> Any:
    """NumPy and torch scalars or arrays that slipped into evidence or metrics."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} cannot be written to a report")


def load_report(path: str | Path) -> dict[str, Any]:
    """Read and check a saved report; a ValueError says what is wrong with it."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON: {err}") from None
    validate_report(report)
    return report


def validate_report(report: Any) -> None:
    """Raise a ValueError unless `report` has the format described in this module."""
    if not isinstance(report, dict):
        raise ValueError(f"a report is a JSON object, got {type(report).__name__}")
    if report.get("format") != FORMAT or report.get("version") != VERSION:
        raise ValueError(f'a report needs "format": "{FORMAT}" and "version": {VERSION}')
    if not isinstance(report.get("findings"), list):
        raise ValueError('a report needs "findings": a list of findings (Finding.to_dict())')
    for i, item in enumerate(report["findings"]):
        if not isinstance(item, dict) or "code" not in item or "message" not in item:
            raise ValueError(f"finding {i} needs at least a code and a message")
        Finding.from_dict(item)   # unknown codes raise here
    for key in ("loss_history", "val_loss_history", "history"):
        if not isinstance(report.get(key, []), list):
            raise ValueError(f'"{key}" must be a list')


# -- rendering ---------------------------------------------------------------------------------
def prompt_text(path: Path | None = None) -> str:
    """The diagnosis prompt without its front matter."""
    text = (path or OUTPUTS / PROMPT).read_text(encoding="utf-8")
    if text.startswith("---\n"):
        text = text.split("---\n", 2)[2]
    return text.strip()


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


def render_findings(findings: list[dict[str, Any]]) -> str:
    if not findings:
        return "The debugger reported no finding."
    lines = []
    for i, item in enumerate(findings, 1):
        f = Finding.from_dict(item)
        where = f" in `{f.layer}`" if f.layer else ""
        when = f", first seen at step {f.step}" if f.step is not None else ""
        lines.append(f"{i}. `{f.code}`{where} ({f.severity.name.lower()}{when}): {f.message}")
        if f.explained_by:
            lines.append(f"   Likely a consequence of `{f.explained_by}` (listed above): fix that first.")
        if f.evidence:
            lines.append("   Evidence: " + ", ".join(f"{k}={_fmt(v)}" for k, v in f.evidence.items()))
        lines.append(f"   Debugger's suggested fix: {f.advice}")
    return "\n".join(lines)


def render_curve(losses: list[float], name: str) -> str:
    """A loss curve in a few numbers: its ends, its minimum, where it stopped being finite,
    and at most CURVE_POINTS evenly spaced points."""
    if not losses:
        return f"No {name} was recorded."
    finite = [(i, v) for i, v in enumerate(losses) if math.isfinite(v)]
    lines = [f"{len(losses)} values; first {_fmt(losses[0])}, last {_fmt(losses[-1])}."]
    if finite:
        i_min, v_min = min(finite, key=lambda p: p[1])
        lines.append(f"Lowest {_fmt(v_min)} at index {i_min}.")
    bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    if bad is not None:
        lines.append(f"First non-finite value at index {bad}.")
    stride = max(1, math.ceil(len(losses) / CURVE_POINTS))
    picks = list(range(0, len(losses), stride))
    if picks[-1] != len(losses) - 1:
        picks.append(len(losses) - 1)
    lines += ["", "| index | " + name + " |", "|---|---|"]
    lines += [f"| {i} | {_fmt(losses[i])} |" for i in picks]
    return "\n".join(lines)


def render_layers(history: list[dict[str, Any]]) -> str:
    """The first and the latest full statistics record (see lesson.debugger.monitor: light records
    leave the spread, zero fraction and update ratios out), per layer and per parameter."""
    if not history:
        return "No per-layer statistics were recorded."
    full = [r for r in history if r.get("full", True)]
    first, last = history[0], (full or history)[-1]
    lines = [f"Latest full record: step {last.get('step')}, loss {_fmt(last.get('loss'))}, "
             f"learning rate {_fmt(last.get('lr'))} ({len(history)} records).", ""]
    layers = last.get("layers") or {}
    if layers:
        lines += ["| layer | kind | act mean | act std | zero fraction | dead fraction "
                  "| sample std | non-finite |", "|---|---|---|---|---|---|---|---|"]
        for name, s in layers.items():
            lines.append(f"| {name} | {s.get('kind', '-')} | {_fmt(s.get('act_mean'))} "
                         f"| {_fmt(s.get('act_std'))} | {_fmt(s.get('zero_fraction'))} "
                         f"| {_fmt(s.get('dead_fraction'))} | {_fmt(s.get('sample_std'))} "
                         f"| {_fmt(s.get('nonfinite'))} |")
        lines.append("")
    params = last.get("params") or {}
    if params:
        before = first.get("params") or {}
        lines += [f"| parameter | grad norm (step {first.get('step')}) | grad norm (latest) "
                  "| weight norm | update/weight | non-finite grad |", "|---|---|---|---|---|---|"]
        for name, s in params.items():
            lines.append(f"| {name} | {_fmt((before.get(name) or {}).get('grad_norm'))} "
                         f"| {_fmt(s.get('grad_norm'))} | {_fmt(s.get('weight_norm'))} "
                         f"| {_fmt(s.get('update_ratio'))} | {_fmt(s.get('nonfinite_grad'))} |")
    return "\n".join(lines).rstrip()


def render_report(report: dict[str, Any]) -> str:
    """The report alone, as Markdown."""
    validate_report(report)
    parts = [f"# The run to diagnose: {report.get('title') or 'a training run'}"]
    if report.get("symptom"):
        parts += ["## What the user saw", report["symptom"]]
    parts += ["## Debugger findings", render_findings(report["findings"]),
              "## Training loss", render_curve(report.get("loss_history") or [], "loss")]
    if report.get("val_loss_history"):
        parts += ["## Validation loss", render_curve(report["val_loss_history"], "val loss")]
    parts += ["## Per-layer statistics", render_layers(report.get("history") or [])]
    metrics = report.get("metrics") or {}
    if metrics:
        parts += ["## Metrics", "\n".join(f"- {k}: {_fmt(v)}" for k, v in metrics.items())]
    if report.get("code"):
        parts += ["## Code", f"```python\n{report['code'].rstrip()}\n```"]
    return "\n\n".join(parts)


def render_prompt(report: dict[str, Any], prompt_path: Path | None = None) -> str:
    """The diagnosis prompt followed by the report: one text to paste into an assistant."""
    return f"{prompt_text(prompt_path)}\n\n---\n\n{render_report(report)}\n"


# -- command line ------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("json", nargs="?", type=Path, help="a report saved as JSON")
    source.add_argument("--case", help="run this catalogue case's broken script and report it")
    parser.add_argument("--seed", type=seed_argument, default=0, help="seed for --case (default 0)")
    parser.add_argument("-o", "--output", type=Path, help="write the prompt here, not to stdout")
    parser.add_argument("--save-json", type=Path, help="also save the report as JSON")
    parser.add_argument("--report-only", action="store_true",
                        help="print the report without the prompt in front")


def run(args: argparse.Namespace) -> int:
    try:
        report = report_from_case(args.case, args.seed) if args.case else load_report(args.json)
    except (ValueError, OSError) as err:
        print(f"nndebug report: {err}", file=sys.stderr)
        return 2
    if args.save_json:
        save_report(report, args.save_json)
    text = render_report(report) + "\n" if args.report_only else render_prompt(report)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
