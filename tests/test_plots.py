"""The plots draw the recorded numbers: checked on the artists, and on the PNG files."""
from __future__ import annotations

import math

import matplotlib.image
import numpy as np
import pytest
from matplotlib.collections import QuadMesh
from matplotlib.figure import Figure

from lesson.findings import Finding
from lesson.production.plots import plot_activations, plot_gradient_flow, plot_loss
from lesson.production.sinks import summarize


def layer(kind: str, mean: float, dead: float | None, nonfinite: int = 0) -> dict:
    return {"kind": kind, "act_mean": mean, "act_std": 0.5, "act_min": mean - 1,
            "act_max": mean + 1, "zero_fraction": 0.5 if dead is not None else 0.0,
            "dead_fraction": dead, "sample_std": 0.4, "nonfinite": nonfinite}


class FakeDebugger:
    """Just the attributes the plots read: history, loss_history, val_loss_history, diagnose."""

    def __init__(self, n_records: int = 6, every: int = 10) -> None:
        self.history = []
        for i in range(n_records):
            step = i * every
            self.history.append({
                "step": step, "loss": 2.0 / (i + 1), "lr": 0.01,
                "layers": {"0": layer("Linear", 0.1 * i, None),
                           "1": layer("ReLU", 0.2, 0.1 * i),
                           "3": layer("ReLU", 0.3, 0.05 * i, nonfinite=int(i == n_records - 1))},
                "params": {"0.weight": {"grad_norm": 1.0 + i, "weight_norm": 2.0,
                                        "update_ratio": 1e-3, "nonfinite_grad": 0},
                           "2.weight": {"grad_norm": 10.0 * (i + 1) if i < n_records - 1
                                        else math.inf, "weight_norm": 2.0,
                                        "update_ratio": 1e-3, "nonfinite_grad": 0}},
            })
        n_steps = n_records * every
        self.loss_history = [2.0 / (1 + s / every) for s in range(n_steps)]
        self.loss_history[-1] = math.nan
        self.val_loss_history = [1.5, 1.2, 1.4]
        self.findings = [Finding("OVERFITTING", "val rises", step=30),
                         Finding("NAN_OR_INF", "loss is nan", step=n_steps - 1, layer="3"),
                         Finding("LR_TOO_HIGH", "no step known")]

    def diagnose(self) -> list[Finding]:
        return self.findings


def meshes(ax) -> list[QuadMesh]:
    return [c for c in ax.collections if isinstance(c, QuadMesh)]


def test_gradient_flow_bars_are_the_last_norms(tmp_path):
    dbg = FakeDebugger()
    fig = plot_gradient_flow(dbg, tmp_path / "flow.png")
    assert isinstance(fig, Figure)
    bars_ax, lines_ax = fig.axes[:2]
    heights = [p.get_height() for p in bars_ax.patches]
    # first the "largest seen" bars, then the last record's (Inf drawn as 0 plus a red cross)
    assert heights == [6.0, 50.0, 6.0, 0.0]
    assert [t.get_text() for t in bars_ax.get_xticklabels()] == ["0.weight", "2.weight"]
    assert any("NaN/Inf" in t.get_text() for t in bars_ax.get_legend().get_texts())
    np.testing.assert_array_equal(lines_ax.lines[0].get_ydata(), [1, 2, 3, 4, 5, 6])
    png = matplotlib.image.imread(tmp_path / "flow.png")
    assert png.ndim == 3 and png.shape[0] > 300 and png.std() > 0.01


def test_gradient_flow_of_all_zero_gradients_warns_nothing(tmp_path):
    import warnings

    dbg = FakeDebugger()
    for rec in dbg.history:
        for p in rec["params"].values():
            p["grad_norm"] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # matplotlib's "no positive values" would raise here
        fig = plot_gradient_flow(dbg, tmp_path / "flow.png")
    assert fig.axes[0].get_yscale() == "linear"
    assert plot_gradient_flow(FakeDebugger()).axes[0].get_yscale() == "log"


def test_activations_heat_map_is_the_dead_fraction(tmp_path):
    dbg = FakeDebugger()
    fig = plot_activations(dbg, tmp_path / "act.png")
    heat = next(ax for ax in fig.axes if "Dead units" in ax.get_title())
    (mesh,) = meshes(heat)
    expected = [[0.1 * i for i in range(6)], [0.05 * i for i in range(6)]]
    np.testing.assert_allclose(np.asarray(mesh.get_array()).reshape(2, 6), expected)
    assert [t.get_text() for t in heat.get_yticklabels()] == ["1", "3"]
    titles = [ax.get_title() for ax in fig.axes]
    assert "0 (Linear)" in titles and "1 (ReLU)" in titles and "3 (ReLU)" in titles
    assert matplotlib.image.imread(tmp_path / "act.png").shape[0] > 300


def test_activations_draw_histograms_over_time_when_kept():
    import torch

    dbg = FakeDebugger()
    g = torch.Generator().manual_seed(0)
    for i, record in enumerate(dbg.history):  # the layer "1" spreads out over time
        sample = torch.randn(500, generator=g) * (1 + i)
        record["histograms"] = {"activations/1": vars(summarize({"a": sample})["a"])}
    fig = plot_activations(dbg)
    panel = next(ax for ax in fig.axes if ax.get_title() == "1 (ReLU)")
    (mesh,) = meshes(panel)
    density = np.asarray(mesh.get_array()).reshape(48, 6)
    assert np.allclose(density.max(axis=0), 1.0)  # each step scaled to its own peak
    spread = [(col > 0.05).sum() for col in density.T]
    assert spread[-1] > 2 * spread[0]  # later steps cover more of the value range


def test_loss_curve_marks_findings_at_their_step(tmp_path):
    dbg = FakeDebugger()
    fig = plot_loss(dbg, tmp_path / "loss.png")
    (ax,) = fig.axes
    train = ax.lines[0].get_ydata()
    np.testing.assert_array_equal(train[:-1], dbg.loss_history[:-1])
    assert math.isnan(train[-1])
    val = ax.lines[1]
    np.testing.assert_array_equal(val.get_ydata(), dbg.val_loss_history)
    np.testing.assert_allclose(val.get_xdata(), [19, 39, 59])
    marks = {line.get_xdata()[0] for line in ax.lines[2:]}
    assert marks == {30, 59}
    labels = {t.get_text() for t in ax.texts}
    assert labels == {"OVERFITTING", "NAN_OR_INF [3]"}
    assert "LR_TOO_HIGH" in ax.get_title()  # undated findings are named, not dropped
    assert matplotlib.image.imread(tmp_path / "loss.png").shape[0] > 300


def test_val_points_use_the_debuggers_steps_when_it_keeps_them():
    dbg = FakeDebugger()
    dbg.val_loss_steps = [5, 25, 45]
    ax = plot_loss(dbg).axes[0]
    np.testing.assert_allclose(ax.lines[1].get_xdata(), [5, 25, 45])


def test_nothing_recorded_is_a_clear_error():
    dbg = FakeDebugger()
    dbg.history, dbg.loss_history = [], []
    for plot in (plot_gradient_flow, plot_activations, plot_loss):
        with pytest.raises(ValueError, match="record"):
            plot(dbg)


def test_no_pyplot_state_is_left_behind():
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    dbg = FakeDebugger()
    plot_gradient_flow(dbg), plot_activations(dbg), plot_loss(dbg)
    assert plt.get_fignums() == before


def test_plots_of_a_real_debugger(tmp_path):
    import torch
    from torch import nn

    from lesson.debugger.monitor import NetworkDebugger

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    x, y = torch.randn(64, 5), torch.randint(0, 2, (64,))
    with NetworkDebugger(model, opt, criterion, every=5) as dbg:
        for step in range(30):
            opt.zero_grad()
            loss = criterion(model(x), y)
            dbg.record_loss(loss.detach())
            loss.backward()
            opt.step()
            if step % 10 == 9:
                dbg.record_val_loss(loss.item() * 1.1)
    for plot, name in ((plot_gradient_flow, "g"), (plot_activations, "a"), (plot_loss, "l")):
        assert isinstance(plot(dbg, tmp_path / f"{name}.png"), Figure)
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000
    ax = plot_loss(dbg).axes[0]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), dbg.loss_history)
