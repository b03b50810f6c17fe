"""The clinic's report: pictures of each case's run and one HTML page that holds them all.

Per case: the loss curve and gradient flow per layer (log scale), drawn by `lesson.production.plots` from
what the NetworkDebugger recorded, the dead fraction of each ReLU layer, plus the active
tool's own picture where there is one (the learning-rate sweep, the gradient-check table).
`index.html` inlines every PNG (base64), so the folder can be zipped, mailed or opened offline.
"""
from __future__ import annotations

import base64
import html
import os
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from broken_models.case import FAMILIES, Case, Run


def _save(fig: Figure, path: Path) -> str:
    fig.savefig(path, format="png", dpi=80)
    return path.name


def _loss_only(losses: list[float], title: str) -> Figure:
    """A loss curve for runs that no NetworkDebugger watched (the NumPy mini-framework)."""
    fig = Figure(figsize=(6, 3), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot(range(len(losses)), losses)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(title)
    return fig


def _dead_fraction(debugger: Any) -> Figure | None:
    """Share of units that output 0 for the whole batch, per ReLU-family layer (last record)."""
    record = debugger.snapshot() if hasattr(debugger, "snapshot") else None
    layers = {name: stats["dead_fraction"] for name, stats in (record or {}).get("layers", {}).items()
              if stats.get("dead_fraction") is not None}
    if not layers:
        return None
    fig = Figure(figsize=(6, 2.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.bar(list(layers), list(layers.values()), color="tab:red")
    ax.axhline(0.5, color="grey", linestyle="--", linewidth=1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("dead fraction")
    ax.set_xlabel("layer")
    ax.set_title("ReLU units that are 0 for every sample (last record)")
    return fig


def draw_case(run: Run, folder: Path) -> list[tuple[str, str]]:
    """Write the case's PNGs into `folder`; return (caption, file name) pairs."""
    folder.mkdir(parents=True, exist_ok=True)
    pictures: list[tuple[str, str]] = []
    debugger = run.debugger
    if debugger is not None:
        from lesson.production.plots import plot_gradient_flow, plot_loss

        pictures.append(("Loss (findings marked)", _save(plot_loss(debugger), folder / "loss.png")))
        pictures.append(("Gradient flow per layer (log scale)",
                         _save(plot_gradient_flow(debugger), folder / "gradient_flow.png")))
        dead = _dead_fraction(debugger)
        if dead is not None:
            pictures.append(("Dead fraction per ReLU layer", _save(dead, folder / "dead_fraction.png")))
    elif run.metrics.get("losses"):
        pictures.append(("Loss", _save(_loss_only(run.metrics["losses"], run.case), folder / "loss.png")))
    if run.report is not None and hasattr(run.report, "suggested_lr") and hasattr(run.report, "plot"):
        pictures.append(("Learning-rate sweep", _save(run.report.plot(), folder / "lr_finder.png")))
    return pictures


def gradient_table(report: Any) -> str:
    """The gradient check's per-parameter table as HTML (empty when the tool is another)."""
    params = getattr(report, "params", None)
    if not params or not hasattr(params[0], "rel_diff"):
        return ""
    rows = "".join(
        f"<tr class='{'ok' if p.passed else 'bad'}'><td>{html.escape(p.name)}</td>"
        f"<td>{tuple(p.shape)}</td><td>{p.numerical:.3e}</td><td>{p.analytical:.3e}</td>"
        f"<td>{p.rel_diff:.2e}</td><td>{'OK' if p.passed else 'MISMATCH'}</td></tr>"
        for p in params)
    return ("<table><tr><th>parameter</th><th>shape</th><th>numerical</th><th>analytical</th>"
            f"<th>relative difference</th><th></th></tr>{rows}</table>")


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
tr.bad td, span.bad { color: #b00020; } tr.ok td:last-child, span.ok { color: #1b7f3b; }
pre { background: #f6f8fa; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.3em 0; }
.case { border-top: 2px solid #ddd; margin-top: 2em; padding-top: 0.5em; }
"""


def _inline(folder: Path, name: str) -> str:
    data = base64.b64encode((folder / name).read_bytes()).decode("ascii")
    return f"<img alt='{html.escape(name)}' src='data:image/png;base64,{data}'>"


def write_index(out: Path, entries: list[dict[str, Any]], seed: int, seconds: float) -> Path:
    """One page: the summary table, then one section per case with its pictures inline."""
    esc = html.escape
    rows = []
    for e in entries:
        cls = "ok" if e["verdict"] == "diagnosed" else "bad"
        rows.append(f"<tr class='{cls}'><td><a href='#{e['name']}'>{esc(e['name'])}</a></td>"
                    f"<td>{'yes' if e['symptom_seen'] else 'no'}</td>"
                    f"<td>{esc(', '.join(e['expected']))}</td><td>{esc(', '.join(e['found']))}</td>"
                    f"<td>{esc(e['verdict'])}</td><td>{esc(e.get('fix_verdict', ''))}</td></tr>")
    sections = []
    for family, title in FAMILIES.items():
        members = [e for e in entries if e["family"] == family]
        if not members:
            continue
        sections.append(f"<h2>{esc(title)}</h2>")
        for e in members:
            case: Case = e["case"]
            findings = "".join(f"<li><b>{esc(f['code'])}</b>{' [' + esc(f['layer']) + ']' if f['layer'] else ''}: "
                               f"{esc(f['message'])}</li>" for f in e["findings"]) or "<li>none</li>"
            pictures = "".join(f"<figure>{_inline(out / e['name'], name)}<figcaption>{esc(caption)}"
                               f"</figcaption></figure>" for caption, name in e["pictures"])
            reference = f"<p><b>Seen in the wild:</b> {esc(case.reference)}</p>" if case.reference else ""
            sections.append(
                f"<div class='case' id='{e['name']}'><h3>{esc(case.title)} <code>{e['name']}</code></h3>"
                f"<p><b>Symptom:</b> {esc(case.symptom)} "
                f"(seen: <span class='{'ok' if e['symptom_seen'] else 'bad'}'>"
                f"{'yes' if e['symptom_seen'] else 'no'}</span>)</p>"
                f"<p><b>Tool:</b> {esc(case.tool)} &nbsp; <b>Lesson:</b> {esc(case.lesson)} &nbsp; "
                f"<b>Verdict:</b> {esc(e['verdict'])}</p>"
                f"<p><b>Findings</b></p><ul>{findings}</ul>{e['gradient_table']}{pictures}"
                f"<p><b>Fix:</b> {esc(case.fix)}</p>{reference}"
                f"<details><summary>The bug (diff broken &rarr; fixed)</summary><pre>{esc(case.diff())}</pre>"
                f"</details></div>")
    diagnosed = sum(e["verdict"] == "diagnosed" for e in entries)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>nndebug clinic</title>"
            f"<style>{_STYLE}</style></head><body><h1>nndebug clinic</h1>"
            f"<p>{diagnosed} of {len(entries)} broken networks diagnosed (seed {seed}, "
            f"{seconds:.0f} s).</p><table><tr><th>case</th><th>symptom seen</th><th>expected</th>"
            f"<th>found</th><th>verdict</th><th>fix</th></tr>{''.join(rows)}</table>"
            f"{''.join(sections)}</body></html>")
    path = out / "index.html"
    path.write_text(page, encoding="utf-8")
    return path


def relative(path: Path) -> str:
    """`path` relative to the working directory when it is below it (for printing)."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)
