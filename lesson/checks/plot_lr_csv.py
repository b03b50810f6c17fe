"""Draw a learning-rate range test from its CSV (the lesson's exercise 3 reader).

    python -m lesson.checks.plot_lr_csv lr_finder.csv -o lr_finder.png

The CSV is what `find_learning_rate(...).to_csv(path)` writes: columns lr, loss and, when
present, smoothed_loss and suggested (1 on the suggested row). The plot has a log-scaled
learning-rate axis, the raw and smoothed losses, and the suggestion marked.
"""
from __future__ import annotations

import argparse
import csv
import sys
from typing import Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def read_lr_csv(path: str) -> tuple[list[float], list[float], list[float] | None, float | None]:
    """(lrs, losses, smoothed losses or None, suggested lr or None) from a range-test CSV."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or "lr" not in rows[0] or "loss" not in rows[0]:
        raise ValueError(f"{path}: expected a CSV with 'lr' and 'loss' columns")
    lrs = [float(r["lr"]) for r in rows]
    losses = [float(r["loss"]) for r in rows]
    smoothed = [float(r["smoothed_loss"]) for r in rows] if "smoothed_loss" in rows[0] else None
    marked = [float(r["lr"]) for r in rows if r.get("suggested", "0").strip() == "1"]
    return lrs, losses, smoothed, (marked[0] if marked else None)


def plot_lr_curve(lrs: Sequence[float], losses: Sequence[float],
                  smoothed: Sequence[float] | None = None, suggested_lr: float | None = None,
                  path: str | None = None, title: str = "LR range test"):
    """Loss against learning rate on a log axis; returns the Figure, saves it if `path`.

    The figure is drawn with the Agg canvas and never registered with pyplot, so it works
    on servers and in CI and leaves a notebook's backend alone (it still displays inline)."""
    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.plot(lrs, losses, color="0.7", lw=1, label="loss")
    if smoothed is not None:
        ax.plot(lrs, smoothed, color="C0", lw=2, label="smoothed loss")
    if suggested_lr is not None:
        ax.axvline(suggested_lr, color="C3", ls="--", label=f"suggested lr = {suggested_lr:.2e}")
    ax.set_xscale("log")
    ax.set_xlabel("learning rate (log scale)")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lesson.checks.plot_lr_csv",
                                     description="plot a learning-rate range test CSV")
    parser.add_argument("csv", help="file written by find_learning_rate(...).to_csv(path)")
    parser.add_argument("-o", "--output", help="PNG to write (default: the CSV's name, .png)")
    args = parser.parse_args(argv)
    lrs, losses, smoothed, suggested = read_lr_csv(args.csv)
    out = args.output or args.csv.rsplit(".", 1)[0] + ".png"
    plot_lr_curve(lrs, losses, smoothed, suggested, path=out)
    print(f"wrote {out} ({len(lrs)} points" +
          (f", suggested lr {suggested:.2e})" if suggested else ")"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
