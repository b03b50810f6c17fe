"""Three pictures of a run, drawn from what the debugger recorded.

- `plot_gradient_flow`: gradient norm per parameter (last record and worst seen), and over time;
- `plot_activations`: each layer's activation distribution over time (histograms where the
  debugger kept them, else min/max and mean +- std bands), and a heat map of the dead fraction
  per ReLU-family layer and step;
- `plot_loss`: training and validation loss, each finding marked at the step it appeared.

Each returns a matplotlib `Figure` and, given `path`, also saves it as a PNG. Figures are made
with the non-interactive Agg canvas and never registered with pyplot, so nothing opens a window
and nothing accumulates in a long job.
"""
from __future__ import annotations

import math
import os
from typing import Any, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

_DPI = 100


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _finish(fig: Figure, path: str | os.PathLike[str] | None) -> Figure:
    if path is not None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, format="png")
    return fig


def _history(debugger: Any, what: str) -> list[dict[str, Any]]:
    history = list(getattr(debugger, "history", None) or [])
    if not history:
        raise ValueError(f"no statistics recorded yet, nothing to plot for {what}: train a few "
                         f"steps with the debugger attached first")
    return history


def _finite_or_nan(value: Any) -> float:
    return math.nan if value is None else float(value)


def _max_finite(values: np.ndarray) -> np.ndarray:
    """Column-wise maximum over the finite entries (NaN where a column has none)."""
    best = np.where(np.isfinite(values), values, -np.inf).max(axis=0)
    return np.where(np.isfinite(best), best, np.nan)


# -- gradient flow -------------------------------------------------------------------------------

def plot_gradient_flow(debugger: Any, path: str | os.PathLike[str] | None = None) -> Figure:
    """Gradient norm of every parameter: a bar chart (last record, and the largest seen) in
    forward order, so vanishing (bars shrinking towards the input) and exploding (huge bars)
    gradients show at a glance, and the same norms over training steps."""
    history = _history(debugger, "gradient flow")
    names = list(dict.fromkeys(n for r in history for n in r.get("params", {})))
    if not names:
        raise ValueError("the records hold no parameter statistics")
    steps = [r["step"] for r in history]
    norms = np.array([[_finite_or_nan(r.get("params", {}).get(n, {}).get("grad_norm"))
                       for n in names] for r in history])  # (records, params)

    fig = _figure(max(8.0, 0.5 * len(names) + 4), 7.5)
    bars, lines = fig.subplots(2, 1)
    x = np.arange(len(names))
    last = norms[-1]
    worst = _max_finite(norms)
    bars.bar(x, np.nan_to_num(worst, nan=0.0), color="tab:blue", alpha=0.3,
             label="largest seen")
    bars.bar(x, np.where(np.isfinite(last), last, 0.0), color="tab:blue",
             label=f"step {steps[-1]}")
    bad = ~np.isfinite(last)
    if bad.any():
        top = np.nanmax(worst) if np.isfinite(worst).any() else 1.0
        bars.scatter(x[bad], np.full(bad.sum(), top), marker="x", color="red", zorder=3,
                     label="NaN/Inf gradient")
    # log scale needs one positive norm; a run whose every gradient is 0 is drawn linear
    scale = "log" if (np.isfinite(norms) & (norms > 0)).any() else "linear"
    bars.set_yscale(scale)
    if scale == "linear":
        bars.set_title("every gradient norm is 0", loc="right", fontsize=8, color="red")
    bars.set_xticks(x, names, rotation=60, ha="right", fontsize=8)
    bars.set_ylabel("gradient norm")
    bars.set_title("Gradient flow (input on the left, output on the right)")
    bars.legend(fontsize=8)

    for j, name in enumerate(names):
        lines.plot(steps, norms[:, j], label=name, linewidth=1)
    lines.set_yscale(scale)
    lines.set_xlabel("step")
    lines.set_ylabel("gradient norm")
    lines.set_title("Gradient norms over training")
    if len(names) <= 12:
        lines.legend(fontsize=7, ncol=2)
    return _finish(fig, path)


# -- activations ---------------------------------------------------------------------------------

def _layer_histograms(history: Sequence[dict[str, Any]], name: str,
                      bins: int = 48) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(step edges, value edges, density) of the activation histograms kept for `name`, each
    step rebinned onto one common value grid and scaled to its own maximum; None if none."""
    kept = [(r["step"], r["histograms"][f"activations/{name}"]) for r in history
            if f"activations/{name}" in (r.get("histograms") or {})]
    kept = [(s, h) for s, h in kept if sum(h["counts"]) > 0]
    if not kept:
        return None
    lo = min(h["edges"][0] for _, h in kept)
    hi = max(h["edges"][-1] for _, h in kept)
    if hi <= lo:
        hi = lo + 1.0
    grid = np.linspace(lo, hi, bins + 1)
    density = np.zeros((bins, len(kept)))
    for i, (_, h) in enumerate(kept):
        edges = np.asarray(h["edges"], dtype=float)
        centres = (edges[:-1] + edges[1:]) / 2
        column, _ = np.histogram(centres, bins=grid, weights=np.asarray(h["counts"], dtype=float))
        density[:, i] = column / max(column.max(), 1.0)
    steps = np.array([s for s, _ in kept], dtype=float)
    gaps = np.diff(steps) if len(steps) > 1 else np.array([1.0])
    step_edges = np.concatenate([[steps[0] - gaps[0] / 2], steps[:-1] + gaps / 2,
                                 [steps[-1] + gaps[-1] / 2]]) if len(steps) > 1 else \
        np.array([steps[0] - 0.5, steps[0] + 0.5])
    return step_edges, grid, density


def plot_activations(debugger: Any, path: str | os.PathLike[str] | None = None) -> Figure:
    """Each layer's activations over time (one panel per layer) and, for ReLU-family layers,
    the fraction of dead units per layer and step as a heat map."""
    history = _history(debugger, "activations")
    names = list(dict.fromkeys(n for r in history for n in r.get("layers", {})))
    if not names:
        raise ValueError("the records hold no activation statistics")
    steps = np.array([r["step"] for r in history], dtype=float)

    def series(name: str, stat: str) -> np.ndarray:
        return np.array([_finite_or_nan(r.get("layers", {}).get(name, {}).get(stat))
                         for r in history])

    ncols = min(4, len(names))
    nrows = math.ceil(len(names) / ncols)
    fig = _figure(3.2 * ncols + 1, 2.4 * nrows + 3.0)
    grid = fig.add_gridspec(nrows + 1, ncols, height_ratios=[1.0] * nrows + [1.2])
    for i, name in enumerate(names):
        ax = fig.add_subplot(grid[i // ncols, i % ncols])
        kind = next((r["layers"][name].get("kind") for r in history if name in r["layers"]), "")
        mean, std = series(name, "act_mean"), series(name, "act_std")
        images = _layer_histograms(history, name)
        if images is not None:
            ax.pcolormesh(*images, cmap="Blues", shading="flat")
        else:
            ax.fill_between(steps, series(name, "act_min"), series(name, "act_max"),
                            color="tab:blue", alpha=0.15, linewidth=0, label="min..max")
            ax.fill_between(steps, mean - std, mean + std, color="tab:blue", alpha=0.35,
                            linewidth=0, label="mean +- std")
        ax.plot(steps, mean, color="tab:orange", linewidth=1, label="mean")
        nonfinite = series(name, "nonfinite")
        if np.nan_to_num(nonfinite).any():
            hit = np.nan_to_num(nonfinite) > 0
            ax.scatter(steps[hit], np.zeros(hit.sum()), marker="x", color="red", zorder=3,
                       label="NaN/Inf")
        ax.set_title(f"{name} ({kind})", fontsize=9)
        ax.tick_params(labelsize=7)
        if i == 0:
            ax.legend(fontsize=6)

    heat = fig.add_subplot(grid[nrows, :])
    relu = [n for n in names if any(r.get("layers", {}).get(n, {}).get("dead_fraction")
                                    is not None for r in history)]
    if relu:
        dead = np.array([series(n, "dead_fraction") for n in relu])
        edges = np.arange(len(steps) + 1) - 0.5
        mesh = heat.pcolormesh(edges, np.arange(len(relu) + 1) - 0.5, dead, cmap="Reds",
                               vmin=0.0, vmax=1.0, shading="flat")
        fig.colorbar(mesh, ax=heat, label="dead fraction")
        ticks = np.linspace(0, len(steps) - 1, min(len(steps), 10)).round().astype(int)
        heat.set_xticks(ticks, [str(int(steps[t])) for t in ticks], fontsize=7)
        heat.set_yticks(np.arange(len(relu)), relu, fontsize=8)
        heat.set_xlabel("step")
        heat.set_title("Dead units (output 0 for every sample) per layer and step")
    else:
        heat.text(0.5, 0.5, "no ReLU-family layer: no dead-unit statistics", ha="center",
                  va="center", transform=heat.transAxes)
        heat.set_axis_off()
    return _finish(fig, path)


# -- loss ----------------------------------------------------------------------------------------

def _val_steps(debugger: Any, n_train: int, n_val: int) -> np.ndarray:
    """Where the validation points go: the debugger's own record of it if it keeps one, else
    spread evenly, the i-th at the end of the i-th of n_val equal stretches of training."""
    steps = getattr(debugger, "val_loss_steps", None)
    if steps is not None and len(steps) == n_val:
        return np.asarray(steps, dtype=float)
    return np.array([(i + 1) * n_train / n_val - 1 for i in range(n_val)], dtype=float)


def plot_loss(debugger: Any, path: str | os.PathLike[str] | None = None) -> Figure:
    """Training loss (and validation loss if recorded), each `diagnose()` finding drawn as a
    vertical line at the step it first appeared, non-finite losses as red crosses."""
    train = np.array([_finite_or_nan(v) for v in getattr(debugger, "loss_history", [])])
    val = np.array([_finite_or_nan(v) for v in getattr(debugger, "val_loss_history", []) or []])
    if train.size == 0:
        raise ValueError("no loss recorded yet: call debugger.record_loss(loss) every step")
    findings = debugger.diagnose() if hasattr(debugger, "diagnose") else []

    fig = _figure(9, 4.5)
    ax = fig.subplots()
    steps = np.arange(train.size)
    ax.plot(steps, train, color="tab:blue", linewidth=1, label="training loss")
    if val.size:
        ax.plot(_val_steps(debugger, train.size, val.size), val, color="tab:green",
                marker="o", markersize=3, linewidth=1.5, label="validation loss")
    values = np.concatenate([train, val])
    finite = values[np.isfinite(values)]
    if finite.size and finite.min() > 0 and finite.max() / finite.min() > 100:
        ax.set_yscale("log")
    top = finite.max() if finite.size else 1.0
    bad = ~np.isfinite(train)
    if bad.any():
        ax.scatter(steps[bad], np.full(bad.sum(), top), marker="x", color="red", zorder=3,
                   label="NaN/Inf loss")
    colours = {"CRITICAL": "red", "ERROR": "tab:orange", "WARNING": "goldenrod", "INFO": "grey"}
    for finding in findings:
        if finding.step is None:
            continue
        colour = colours.get(finding.severity.name, "grey")
        ax.axvline(finding.step, color=colour, linestyle="--", linewidth=1)
        label = finding.code + (f" [{finding.layer}]" if finding.layer else "")
        ax.annotate(label, (finding.step, 1.0), xycoords=("data", "axes fraction"),
                    rotation=90, va="top", ha="right", fontsize=7, color=colour)
    undated = [f.code for f in findings if f.step is None]
    if undated:
        ax.set_title("Loss; also found: " + ", ".join(undated), fontsize=9)
    else:
        ax.set_title("Loss" + (" with findings at the step they appeared" if findings else ""))
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=8, loc="best")
    return _finish(fig, path)
