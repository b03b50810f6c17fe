"""The LR range test: lesson-compatible return, smoothing, stop rules, suggestion, CSV, plot."""
import csv
import io
import math
import subprocess
import sys
from contextlib import redirect_stdout

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lesson.checks.lr_finder import LRFinderResult, find_learning_rate, smooth, suggest_lr

CE = nn.CrossEntropyLoss()


def _data(n=256, seed=42):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    return x, (x[:, 0] > 0).long()


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))


def test_lesson_snippet_runs_and_returns_lr_loss_pairs():
    x, y = _data(64)
    out = io.StringIO()
    with redirect_stdout(out):
        result = find_learning_rate(_mlp(), x, y, CE)
    assert isinstance(result, list) and isinstance(result, LRFinderResult)
    lrs = [lr for lr, _ in result]
    assert lrs[0] == pytest.approx(1e-7) and all(b > a for a, b in zip(lrs, lrs[1:]))
    assert all(isinstance(loss, float) and math.isfinite(loss) for _, loss in result)
    assert "Suggested learning rate" in out.getvalue()


def test_suggestion_trains_well_on_the_lesson_task():
    """Train 100 full-batch SGD steps at the suggestion and at 1/10 and 10x of it."""
    x, y = _data()
    sugg = find_learning_rate(_mlp(), x, y, CE, verbose=False).suggested_lr
    assert sugg is not None and 1e-3 < sugg < 10

    def final_loss(lr):
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for _ in range(100):
            opt.zero_grad()
            loss = CE(model(x), y)
            loss.backward()
            opt.step()
        return CE(model(x), y).item()

    at_sugg = final_loss(sugg)
    assert math.isfinite(at_sugg)
    assert at_sugg < 0.5 * final_loss(sugg / 10)  # far better than a rate 10x lower


def test_smoothing_is_bias_corrected():
    assert smooth([2.0, 2.0, 2.0], beta=0.9) == pytest.approx([2.0, 2.0, 2.0])
    s = smooth([1.0, 3.0], beta=0.5)
    # avg_1 = 0.5, avg_2 = 0.5 * 0.5 + 0.5 * 3 = 1.75; corrected by 1 - 0.5 and 1 - 0.25
    assert s == pytest.approx([1.0, 1.75 / 0.75])


def test_stops_at_divergence_and_drops_nonfinite_losses():
    x, y = _data()
    result = find_learning_rate(_mlp(), x, y, CE, end_lr=1e4, steps=120, verbose=False)
    assert result.stopped in {"diverged", "nonfinite"}
    assert len(result) < 120
    assert all(math.isfinite(loss) for loss in result.losses)


def test_nan_from_the_start_gives_no_suggestion_and_no_crash():
    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(10, 2)

        def forward(self, x):
            return self.lin(x) * float("nan")

    x, y = _data(32)
    result = find_learning_rate(Broken(), x, y, CE, verbose=False)
    assert len(result) == 0 and result.suggested_lr is None and result.stopped == "nonfinite"


def test_suggestion_rule_on_a_synthetic_curve():
    """Flat until 1e-3, falls until 1e-1, blows up after: suggestion sits in the fall."""
    lrs = [10 ** (-6 + 6 * i / 99) for i in range(100)]
    loss = [2.0 if lr < 1e-3 else max(0.2, 2.0 - 0.9 * math.log10(lr / 1e-3)) for lr in lrs]
    loss = [v if lr < 0.2 else v + 50 * (lr - 0.2) for v, lr in zip(loss, lrs)]
    s = suggest_lr(lrs, smooth(loss, 0.85))
    assert 1e-3 < s < 0.1
    assert suggest_lr(lrs[:5], loss[:5]) is None
    assert suggest_lr(lrs, [1.0] * 100) is None  # never went down: no suggestion
    with pytest.raises(ValueError, match="same length"):
        suggest_lr(lrs, loss, raw=loss[:50])


def test_a_spike_back_above_the_start_marks_the_edge_even_if_the_loss_recovers():
    """Adam's sweeps often blow up once, recover and keep falling to a lower minimum: the
    rate of the blow-up, not the later minimum, bounds the suggestion (a third of it)."""
    lrs = [10 ** (-6 + 6 * i / 99) for i in range(100)]
    loss = [2.0 if lr < 1e-4 else max(0.2, 2.0 - 0.6 * math.log10(lr / 1e-4)) for lr in lrs]
    spike = min(range(100), key=lambda i: abs(math.log10(lrs[i] / 1e-2)))
    raw = list(loss)
    raw[spike] = 2.5  # one step undoes the whole fall ...
    raw[spike + 1:] = [v * 0.9 for v in raw[spike + 1:]]  # ... then the loss keeps falling
    sugg = suggest_lr(lrs, smooth(raw, 0.85), raw=raw)
    assert 1e-4 < sugg <= lrs[spike] / 3 * 1.0001
    # without the spike the same curve's suggestion sits higher, in the steep part of the fall
    calm = list(loss)
    calm[spike + 1:] = [v * 0.9 for v in calm[spike + 1:]]
    assert suggest_lr(lrs, smooth(calm, 0.85), raw=calm) > lrs[spike] / 3 * 1.0001


def test_a_spike_before_half_the_fall_is_noise_not_an_edge():
    """Batch-to-batch noise (regression) early in the fall does not cap the suggestion; the
    same spike once half the fall is done does. (Same smoothed curve: only `raw` differs.)"""
    lrs = [10 ** (-6 + 6 * i / 99) for i in range(100)]
    # a sigmoid in log lr: falls fastest at 1e-2, minimum at the end of the sweep
    loss = [0.2 + 1.8 / (1 + math.exp(3 * (math.log10(lr) + 2))) for lr in lrs]
    smoothed = smooth(loss, 0.85)
    clean = suggest_lr(lrs, smoothed, raw=loss)
    assert 5e-3 < clean < 3e-2
    early = next(i for i, v in enumerate(smoothed) if v < 1.6)  # 20% of the fall done
    late = next(i for i, v in enumerate(smoothed) if v < 0.8)  # two thirds done
    for i, capped in ((early, False), (late, True)):
        raw = list(loss)
        raw[i] = 2.5  # above the starting loss of 2.0
        sugg = suggest_lr(lrs, smoothed, raw=raw)
        if capped:
            assert sugg == pytest.approx(lrs[i] / 3)
        else:
            assert sugg == clean


def _sigmoid_sweep(noise: float = 0.0, seed: int = 0) -> tuple[list[float], list[float]]:
    """A sigmoid fall in log lr (fastest at 1e-2), plus batch scatter of `noise` (sd)."""
    g = torch.Generator().manual_seed(seed)
    lrs = [10 ** (-6 + 6 * i / 99) for i in range(100)]
    jitter = (noise * torch.randn(100, generator=g)).tolist()
    return lrs, [0.2 + 1.8 / (1 + math.exp(3 * (math.log10(lr) + 2))) + e
                 for lr, e in zip(lrs, jitter)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_lone_spike_within_the_batch_scatter_is_not_an_edge(seed):
    """Recurrent networks' batch losses scatter widely mid-fall: one batch back above the
    plateau there is scatter and leaves the suggestion alone; two in a row mark the edge.
    (Same smoothed curve: only `raw` differs.)"""
    lrs, raw = _sigmoid_sweep(noise=0.1, seed=seed)
    smoothed = smooth(raw, 0.85)
    clean = suggest_lr(lrs, smoothed, raw=raw)
    i = next(i for i, v in enumerate(smoothed) if v < 1.0)  # over half the fall done
    plateau = sorted(smoothed[10:20])[5]
    one = list(raw)
    one[i] = plateau + 0.05                     # within the scatter (sd 0.1) of the plateau
    assert suggest_lr(lrs, smoothed, raw=one) == clean
    two = list(one)
    two[i + 1] = plateau + 0.05
    assert suggest_lr(lrs, smoothed, raw=two) == pytest.approx(min(clean, lrs[i] / 3))


def test_an_early_chance_dip_of_a_noisy_sweep_is_not_the_fall():
    """On a noisy sweep the smoothed loss can dip well below the plateau by chance at rates
    that change nothing; the fall that counts is the one into the minimum."""
    lrs, loss = _sigmoid_sweep()
    clean = suggest_lr(lrs, loss, raw=loss)
    dipped = list(loss)
    for i in range(28, 33):                     # lr ~ 5e-5..1e-4: far too small to learn
        dipped[i] = 0.9                         # below half the real fall
    sugg = suggest_lr(lrs, dipped, raw=dipped)
    assert sugg == pytest.approx(clean)
    assert 5e-3 < sugg < 3e-2


def test_adam_and_a_data_loader():
    x, y = _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    result = find_learning_rate(_mlp(), loader, None, CE, optimizer="adam", verbose=False)
    assert len(result) >= 50
    assert result.suggested_lr is not None and 1e-5 < result.suggested_lr < 1


@pytest.mark.slow
def test_csv_and_plot_and_the_exercise_reader(tmp_path):
    x, y = _data(64)
    result = find_learning_rate(_mlp(), x, y, CE, verbose=False)
    path = tmp_path / "lr.csv"
    result.to_csv(str(path))
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(result)
    assert [float(r["lr"]) for r in rows] == result.lrs
    assert sum(int(r["suggested"]) for r in rows) == 1
    fig = result.plot()
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    assert any("suggested" in t.get_text() for t in ax.get_legend().get_texts())
    png = tmp_path / "lr.png"
    result.plot(str(png))
    assert png.stat().st_size > 1000
    out = tmp_path / "from_csv.png"
    done = subprocess.run([sys.executable, "-m", "lesson.checks.plot_lr_csv", str(path), "-o",
                           str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 1000 and done.stderr == ""


def test_reader_rejects_a_csv_without_lr_column(tmp_path):
    from lesson.checks.plot_lr_csv import read_lr_csv

    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="'lr'"):
        read_lr_csv(str(bad))


@pytest.mark.parametrize("kwargs, error", [
    ({"start_lr": 1.0, "end_lr": 1.0}, ValueError),
    ({"start_lr": 10.0, "end_lr": 1.0}, ValueError),
    ({"start_lr": -1.0}, ValueError),
    ({"steps": 0}, ValueError),
    ({"optimizer": "rmsprop-ish"}, ValueError),
])
def test_bad_arguments_are_clear_errors(kwargs, error):
    x, y = _data(16)
    with pytest.raises(error):
        find_learning_rate(_mlp(), x, y, CE, verbose=False, **kwargs)


def test_bad_inputs_are_clear_errors():
    x, y = _data(16)
    with pytest.raises(TypeError, match="nn.Module"):
        find_learning_rate("model", x, y, CE)
    with pytest.raises(ValueError, match="differ in length"):
        find_learning_rate(_mlp(), x, y[:8], CE)
    with pytest.raises(ValueError, match="empty"):
        find_learning_rate(_mlp(), x[:0], y[:0], CE)
    with pytest.raises(ValueError, match="no trainable"):
        find_learning_rate(nn.ReLU(), x, y, CE)
    with pytest.raises(TypeError, match="criterion"):
        find_learning_rate(_mlp(), x, y, None)
