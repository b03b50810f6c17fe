"""The LR range test: lesson-compatible return, smoothing, stop rules, suggestion, CSV, plot."""
import copy
import csv
import io
import itertools
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
    """Train 100 full-batch SGD steps at the suggestion and at 1/30 of it."""
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
    assert at_sugg < 0.5 * final_loss(sugg / 30)  # far better than a rate 30x lower


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


def test_an_optimizer_factory_without_lr_is_named_before_anything_trains():
    """The sweep sets the rate itself: a factory of the parameters alone cannot take it."""
    x, y = _data(16)
    model = _mlp()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(TypeError, match="takes no lr.*lambda p, lr"):
        find_learning_rate(model, x, y, CE, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    result = find_learning_rate(model, x, y, CE, steps=30, verbose=False,
                                optimizer=lambda p, lr: torch.optim.SGD(p, lr=lr))
    assert len(result) > 0


# -- which rule the sweep calls for (lesson.checks.lr_suggestion) ---------------------------------
from functools import partial  # noqa: E402

from lesson.checks import lr_suggestion as rules  # noqa: E402
from lesson.checks.lr_suggestion import choose_lr  # noqa: E402

LRS = [10 ** (-6 + 7 * i / 99) for i in range(100)]      # 1e-6 .. 10, as a sweep's


def _edge_sweep(fall: float = 0.7, edge: float = 0.5, seed: int = 0,
                noise: float = 0.03) -> list[float]:
    """A classifier's sweep: flat at ln 10 until 1e-3, its log falling by `fall` linearly in
    log lr until `edge`, then doubling at each step; multiplicative batch scatter of `noise`."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for lr in LRS:
        x = min(max(math.log10(lr / 1e-3) / math.log10(edge / 1e-3), 0.0), 1.0)
        steps_past = max(0.0, math.log10(lr / edge)) * 99 / 7     # sweep steps past the edge
        out.append(math.log(10) * math.exp(-fall * x) * 2 ** steps_past)   # doubling each step
    scatter = torch.exp(noise * torch.randn(len(LRS), generator=g))
    return [v * float(s) for v, s in zip(out, scatter)]


def _choose(raw, **kw):
    """The rule on a sweep of a classification loss (unless `classification=False`)."""
    return choose_lr(LRS, smooth(raw), 10, raw, **{"classification": True, **kw})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plain_sgd_stopped_mid_fall_by_the_edge_gets_a_rate_near_the_edge(seed):
    raw = _edge_sweep(seed=seed)
    edge = _choose(raw, plain_sgd=True)
    # the edge is read at the bottom of the loss's median curve: on a V-shaped cliff (the loss
    # doubling at each step past 0.5) a little before the cliff, never past it
    assert edge.kind == "edge" and 0.2 < edge.edge < 0.5
    assert edge.lr == pytest.approx(rules.EDGE_SHARE * edge.edge)
    assert "plain SGD on a classification loss" in edge.reason
    # the same sweep run with momentum or Adam: the steepest descent, a third of the edge at most
    other = _choose(raw)
    assert other.kind == "steepest" and other.lr <= other.edge / rules.STEEPEST_CAP * 1.0001
    assert "momentum" in other.reason and edge.lr > 2.5 * other.lr
    adam = _choose(raw, adaptive=True)             # below both caps: the same descent
    assert adam.kind == "steepest" and "adaptive" in adam.reason and adam.edge == other.edge
    assert adam.lr == other.lr < other.edge / rules.ADAPTIVE_CAP


def test_plain_sgd_on_a_regression_loss_is_read_by_the_steepest_rule():
    """The same sweep, but from a regression loss: its curvature does not fall as it learns,
    so the steepest descent, at most a third of the edge."""
    raw = _edge_sweep()
    reg = _choose(raw, plain_sgd=True, classification=False)
    assert reg.kind == "steepest" and "not a classifier" in reg.reason
    assert reg.lr <= reg.edge / rules.STEEPEST_CAP * 1.0001
    assert _choose(raw, plain_sgd=True).kind == "edge"


def test_a_loss_still_falling_at_the_end_of_the_sweep_shows_no_edge():
    """No rise after the low: there is no edge to take 0.9 of, so the steepest rule reads it;
    a rise back by EDGE_RISE of the fall is an edge."""
    falling = _edge_sweep(edge=100.0, noise=0.0)              # the cliff lies past end_lr
    got = _choose(falling, plain_sgd=True)
    assert got.kind == "steepest" and "no edge of stability" in got.reason
    low = math.log(falling[79])
    drop = math.log(math.log(10)) - low
    for rise, kind in ((1.1 * rules.EDGE_RISE, "edge"), (0.9 * rules.EDGE_RISE, "steepest")):
        # falling, flat at its low for 10 steps, then back up by `rise` of the fall
        bent = falling[:80] + [math.exp(low)] * 10 + [math.exp(low + rise * drop)] * 10
        assert _choose(bent, plain_sgd=True).kind == kind


def _probe(score_of, blow_up_at=math.inf):
    """A probe whose final-weights loss is `score_of(lr / edge)` (the edge taken from the
    rule's call), blowing up at and past `blow_up_at` x the edge; it records its calls."""
    calls = []

    def probe(lr, steps):
        calls.append(lr)
        ratio = lr / probe.edge
        return math.inf if ratio >= blow_up_at else score_of(ratio)
    probe.calls = calls
    return probe


def _probed(raw, probe):
    plain = _choose(raw, plain_sgd=True)
    probe.edge = plain.edge
    return _choose(raw, plain_sgd=True, probe=probe), plain


def test_probes_take_the_largest_rate_that_trains_about_as_well_as_the_best():
    """Untrained loss ln 10 ~ 2.30; scores by multiple of the edge: best 0.3 at 2x (a fall
    of 2.0); 4x falls 1.85 (92.5% of it, kept), 8x 1.70 (85%, not), 16x worse still: two in
    a row short of the bar, so probing stops there."""
    scores = {0.5: 1.0, 1: 0.6, 2: 0.3, 4: 0.45, 8: 0.6, 16: 0.9, 32: 0.35}
    raw = _edge_sweep(noise=0.0)
    probe = _probe(lambda r: scores[round(r, 3)])
    got, plain = _probed(raw, probe)
    assert got.kind == "edge" and got.edge == plain.edge
    assert got.lr == pytest.approx(4 * plain.edge)
    assert [round(c / plain.edge, 3) for c in probe.calls] == [0.5, 1, 2, 4, 8, 16]
    assert [round(r / plain.edge, 3) for r, _ in got.probes] == [0.5, 1, 2, 4, 8, 16]
    assert "4 x the edge" in got.reason and "90%" in got.reason


def test_the_keep_bar_on_both_sides():
    untrained = math.log(10)
    for share, expect in ((rules.PROBE_KEEP + 0.01, 2), (rules.PROBE_KEEP - 0.01, 1)):
        kept = untrained - share * (untrained - 0.3)            # 2x's fall, as a share of 1x's
        probe = _probe(lambda r, kept=kept: {0.5: 1.0, 1: 0.3}.get(round(r, 3), kept)
                       if r <= 2 else 2.2)
        got, plain = _probed(_edge_sweep(noise=0.0), probe)
        assert got.lr == pytest.approx(expect * plain.edge)


def test_probing_stops_where_a_rate_blows_up_and_never_suggests_it():
    probe = _probe(lambda r: 1.0 / r, blow_up_at=4)             # better and better, then NaN
    got, plain = _probed(_edge_sweep(noise=0.0), probe)
    assert got.lr == pytest.approx(2 * plain.edge)
    assert max(probe.calls) == pytest.approx(4 * plain.edge)
    ended_above = _probe(lambda r: 0.2 if r < 8 else 2.31)     # no lower than untrained
    got, plain = _probed(_edge_sweep(noise=0.0), ended_above)
    assert got.lr == pytest.approx(4 * plain.edge) and len(ended_above.calls) == 5


def test_probes_reach_far_above_the_edge_and_no_further_than_64x():
    probe = _probe(lambda r: 1.0 / (1 + r))                     # a sigmoid net's kind
    got, plain = _probed(_edge_sweep(noise=0.0), probe)
    assert len(probe.calls) == rules.PROBE_MAX
    assert got.lr == pytest.approx(64 * plain.edge)


def test_when_even_half_the_edge_does_not_train_the_steepest_rule_reads_the_sweep():
    probe = _probe(lambda r: 2.5)
    got, plain = _probed(_edge_sweep(noise=0.0), probe)
    assert got.kind == "steepest" and "did not bring the loss below" in got.reason
    assert got.lr <= got.edge / rules.STEEPEST_CAP * 1.0001 and len(probe.calls) == 1


def test_a_sweep_that_never_fell_has_its_edge_where_it_rose():
    """A two-layer sigmoid network's sweep stays at ln 10 until its loss blows up: the low of
    its batch scatter is no edge; where the curve first rises 5% above the plateau is."""
    flat = _edge_sweep(fall=0.0, edge=0.5, noise=0.01)
    got = _choose(flat, plain_sgd=True)
    first_past = next(lr for lr in LRS if lr > 0.5)
    assert got.kind == "edge" and 0.5 <= got.edge <= first_past * 1.5
    assert "did not fall" in got.reason
    assert math.expm1(rules.MIN_FALL) == pytest.approx(0.05, abs=0.002)
    still = _edge_sweep(fall=0.0, edge=100.0, noise=0.01)        # never rises either
    nothing = _choose(still, plain_sgd=True)
    assert nothing.lr is None


def test_a_flat_sweep_that_never_rose_gets_no_rate_not_its_scatters_steepest_descent():
    """A sigmoid CNN's sweep to 10 stayed flat (its grid best was 3.2): a fall under 5% is
    scatter, and the steepest descent of scatter is a rate 1e5 too low."""
    flat = _edge_sweep(fall=0.04, edge=100.0, noise=0.0)      # a 4% drift, no rise
    assert rules.steepest_rule(LRS, smooth(flat), 10, flat)[0] is not None
    got = _choose(flat, plain_sgd=True)
    assert got.lr is None and got.reason.startswith(rules.FLAT_SWEEP)
    assert "higher end_lr" in got.reason


def _flat_probe(moves_at: dict[float, float], from_steps: int):
    """A probe for a sweep flat up to 10: blows up above 15; below, the loss moves (to
    `moves_at[lr]`) only in trainings of `from_steps` steps or more, else stays 1% under
    ln 10. It records its calls as (lr, steps)."""
    calls = []

    def probe(lr, steps):
        calls.append((lr, steps))
        if lr > 15:
            return math.inf
        still = 0.99 * math.log(10)
        return moves_at.get(round(lr, 4), still) if steps >= from_steps else still
    probe.calls = calls
    return probe


def test_a_flat_sweep_is_probed_longer_until_a_rate_moves_the_loss():
    """A sigmoid CNN's kind: one step at each rate moved nothing up to the sweep's end (10),
    nor did 50 steps at any fixed rate from 20 down to 10/64; 150 steps at 1.25 did. 0.625
    then falls short of 90% of that fall, and so does 0.3125: two in a row end the probes."""
    flat = _edge_sweep(fall=0.0, edge=100.0, noise=0.0)
    probe = _flat_probe({1.25: 1.8, 0.625: 2.1}, from_steps=150)
    got = _choose(flat, plain_sgd=True, probe=probe)
    assert got.kind == "edge" and got.lr == pytest.approx(1.25) and got.edge is None
    rates = [2 * LRS[-1] / 2 ** k for k in range(rules.FLAT_PROBE_RATES)]
    assert probe.calls == [(r, 50) for r in rates] + [(r, 150) for r in rates[:7]]
    assert got.probes == tuple((r, probe(r, s)) for r, s in probe.calls[:15])
    assert "150 steps" in got.reason and FLAT in got.reason


FLAT = rules.FLAT_SWEEP


def test_a_flat_sweep_whose_probes_never_move_the_loss_gets_no_rate():
    flat = _edge_sweep(fall=0.0, edge=100.0, noise=0.0)
    probe = _flat_probe({}, from_steps=10 ** 6)
    got = _choose(flat, plain_sgd=True, probe=probe)
    assert got.lr is None and got.reason.startswith(FLAT)
    assert [s for _, s in probe.calls] == [n for n in rules.FLAT_PROBE_STEPS
                                           for _ in range(rules.FLAT_PROBE_RATES)]
    assert "450 steps" in got.reason and "higher end_lr" in got.reason
    # a move of just under MIN_FALL is not one; just over it is
    for below, moved in ((0.9 * rules.MIN_FALL, False), (1.1 * rules.MIN_FALL, True)):
        probe = _flat_probe({2.5: math.log(10) * math.exp(-below)}, from_steps=50)
        assert (_choose(flat, plain_sgd=True, probe=probe).lr is not None) is moved


def test_the_finder_probes_a_flat_sweep_on_a_real_model():
    """A linear classifier without bias on inputs scaled by 0.01: its edge of stability is
    ~10^4 times higher than with unit inputs, so a sweep to 10 moves nothing. 50-step
    trainings from 20 down do; the suggestion is the highest probed rate, said so, and it
    trains far better than a rate 8 times lower."""
    x, y = _data(512)
    x = 0.01 * x

    def model():
        torch.manual_seed(0)
        return nn.Linear(10, 2, bias=False)
    result = find_learning_rate(model(), x, y, CE, batch_size=64, verbose=False)
    assert result.kind == "edge" and result.edge_lr is None
    assert result.suggested_lr == pytest.approx(20.0) and "highest probed" in result.rule
    assert result.steps_spent == len(result) + result.probe_steps > len(result) + 50

    def final_loss(lr):
        m = model()
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        for i in range(300):
            rows = slice(64 * (i % 8), 64 * (i % 8 + 1))
            opt.zero_grad()
            CE(m(x[rows]), y[rows]).backward()
            opt.step()
        return CE(m(x), y).item()
    assert final_loss(result.suggested_lr) < final_loss(result.suggested_lr / 8) - 0.1


def test_a_classifier_s_steepest_descent_is_read_in_its_log_loss():
    """A fall from ln 10 to 2% of it, shaped like a smooth step in log lr: the loss itself
    falls fastest halfway, its log near the bottom, where the loss halves fastest. A
    classifier's sweep is read the second way, a regression's the first; both stay under a
    third of the edge."""
    edge = 0.5

    def loss(lr):
        x = min(max(math.log10(lr / 1e-3) / math.log10(edge / 1e-3), 0.0), 1.0)
        past = max(0.0, math.log10(lr / edge)) * 99 / 7
        return math.log(10) * (1 - 0.98 * x * x * (3 - 2 * x)) * 2 ** past
    raw = [loss(lr) for lr in LRS]
    relative = _choose(raw)
    absolute = _choose(raw, classification=False)
    assert relative.kind == absolute.kind == "steepest"
    assert relative.edge == absolute.edge
    # the smoothed loss lags the raw one: its linear fall is steepest a little past halfway
    assert 0.02 < absolute.lr < 0.08 and relative.lr > 3 * absolute.lr
    assert relative.lr == pytest.approx(relative.edge / rules.STEEPEST_CAP)
    adam = _choose(raw, adaptive=True)             # Adam's kind: the lower cap
    assert adam.lr == pytest.approx(relative.edge / rules.ADAPTIVE_CAP)


def test_attention_and_other_optimizers_are_not_probed():
    raw = _edge_sweep(noise=0.0)
    probe = _probe(lambda r: 0.1)
    probe.edge = 1.0
    assert _choose(raw, plain_sgd=True, attention=True, probe=probe).kind == "edge"
    assert _choose(raw, probe=probe).kind == "steepest"
    assert _choose(raw, plain_sgd=True, classification=False, probe=probe).kind == "steepest"
    assert probe.calls == []


def test_the_finder_probes_from_the_initial_weights_and_puts_them_back(monkeypatch):
    """A linear softmax on separable data with plain SGD: its best rates lie far above the
    sweep's edge. Every probe starts from the initial weights, the model ends bitwise as it
    was, and the steps are counted."""
    from lesson.checks import lr_finder

    x, y = _data(512)
    torch.manual_seed(0)
    model = nn.Linear(10, 2)
    before = [p.detach().clone() for p in model.parameters()]
    at_start = []
    train_at = lr_finder._train_at

    def spy(m, *args):
        at_start.append(all(torch.equal(a, b) for a, b in zip(before, m.parameters())))
        return train_at(m, *args)
    monkeypatch.setattr(lr_finder, "_train_at", spy)
    result = find_learning_rate(model, x, y, nn.CrossEntropyLoss(), batch_size=64,
                                verbose=False)
    assert result.kind == "edge" and result.suggested_lr >= 2 * result.edge_lr
    assert len(at_start) >= len(result.probes) >= 3 and all(at_start)
    assert result.steps_spent == len(result) + 50 * len(at_start) == \
        len(result) + result.probe_steps
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    off = find_learning_rate(model, x, y, nn.CrossEntropyLoss(), batch_size=64,
                             probes=False, verbose=False)
    assert off.probes == [] and off.probe_steps == 0
    assert off.suggested_lr == pytest.approx(rules.EDGE_SHARE * off.edge_lr)


def test_probes_on_batches_too_large_to_keep_train_on_fresh_ones(monkeypatch):
    """Past PROBE_BATCH_BYTES the probes keep one batch to score on and train on new ones
    each: the same rule still reads them."""
    from lesson.checks import lr_finder

    x, y = _data(512)
    torch.manual_seed(0)
    kept = find_learning_rate(nn.Linear(10, 2), x, y, CE, batch_size=64, verbose=False)
    monkeypatch.setattr(lr_finder, "PROBE_BATCH_BYTES", 1)
    torch.manual_seed(0)
    fresh = find_learning_rate(nn.Linear(10, 2), x, y, CE, batch_size=64, verbose=False)
    assert fresh.kind == kept.kind == "edge" and fresh.probes
    assert fresh.suggested_lr / fresh.edge_lr in [pytest.approx(2.0 ** k) for k in range(-1, 7)]


def test_attention_layers_take_a_smaller_share_of_the_edge():
    raw = _edge_sweep()
    plain, attention = _choose(raw, plain_sgd=True), _choose(raw, plain_sgd=True, attention=True)
    assert attention.edge == plain.edge
    assert attention.lr == pytest.approx(rules.ATTENTION_SHARE * plain.edge)
    assert "attention" in attention.reason


def test_the_edge_is_read_between_the_sweep_s_steps():
    """A rounded minimum halfway (in log lr) between two sweep steps, 18% apart: the
    parabola through the curve's low finds it within 3%; either step alone is 8% off."""
    k = 80
    true = math.sqrt(LRS[k] * LRS[k + 1])
    raw = [math.log(10) * math.exp(-0.6 + 0.6 * min(math.log10(lr / true) ** 2, 1.0))
           for lr in LRS]
    got = _choose(raw, plain_sgd=True)
    assert got.kind == "edge" and got.edge == pytest.approx(true, rel=0.03)
    assert min(abs(math.log(LRS[k] / true)), abs(math.log(LRS[k + 1] / true))) > math.log(1.08)


def test_a_spike_back_above_the_plateau_is_the_edge_and_a_lone_one_is_not():
    raw = _edge_sweep(noise=0.0)
    clean = _choose(raw, plain_sgd=True)
    i = next(i for i, lr in enumerate(LRS) if lr > 0.05)       # well past half the fall
    two = list(raw)
    two[i] = two[i + 1] = 3.0                                  # the plateau is ln 10 ~ 2.3
    assert _choose(two, plain_sgd=True).edge == pytest.approx(LRS[i])
    noisy = _edge_sweep(noise=0.05)
    one = list(noisy)
    one[i] = 2.4           # above the plateau, within what the batch scatter explains
    assert _choose(one, plain_sgd=True).edge == pytest.approx(_choose(noisy, plain_sgd=True).edge)
    assert clean.edge > 3 * LRS[i]


def test_losses_at_or_below_zero_have_no_log_scale():
    raw = [v - 1.5 for v in _edge_sweep(noise=0.0)]             # goes below 0
    got = _choose(raw, plain_sgd=True)
    assert got.kind == "steepest" and "no log scale" in got.reason


@pytest.mark.parametrize("optimizer, criterion, kind", [
    ("sgd", CE, "edge"), (partial(torch.optim.SGD, momentum=0.9), CE, "steepest"),
    ("adam", CE, "probed"), ("sgd", nn.MSELoss(), "steepest")])
def test_the_finder_says_which_rule_and_why(optimizer, criterion, kind):
    x, y = _data()
    if isinstance(criterion, nn.MSELoss):
        y = torch.nn.functional.one_hot(y, 2).float()
    out = io.StringIO()
    with redirect_stdout(out):
        result = find_learning_rate(_mlp(), x, y, criterion, optimizer=optimizer,
                                    batch_size=32)
    assert result.kind == kind and result.rule.startswith(kind)
    assert result.edge_lr is not None
    if kind == "steepest":
        assert result.suggested_lr <= result.edge_lr / rules.STEEPEST_CAP * 1.0001
        assert "adaptive" not in result.rule
        assert result.probes == [] and result.probe_steps == 0
    elif optimizer == "adam":   # its steepest descent lay above the cap: probed from it down
        cap = result.edge_lr / rules.ADAPTIVE_CAP
        assert result.rule.startswith("probed: steepest: the sweep ran an adaptive optimizer")
        assert [lr for lr, _ in result.probes] == pytest.approx(
            [cap / 2 ** k for k in range(rules.CAPPED_PROBES)])
        assert result.suggested_lr in [lr for lr, _ in result.probes]
        assert result.probe_steps == rules.CAPPED_PROBES * rules.CAPPED_PROBE_STEPS
    else:     # probed: a multiple of the edge, from half of it to 64 times it
        ratio = result.suggested_lr / result.edge_lr
        assert ratio in [pytest.approx(2.0 ** k) for k in range(-1, 7)]
        assert result.probes and "probes" in out.getvalue()
    assert f"Rule, {kind}:" in out.getvalue()


def test_a_network_with_attention_is_told_apart():
    class Attend(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(10, 2, batch_first=True)
            self.head = nn.Linear(10, 2)

        def forward(self, x):
            seq = x.unsqueeze(1)
            return self.head(self.attn(seq, seq, seq)[0][:, 0])

    x, y = _data()
    torch.manual_seed(0)
    result = find_learning_rate(Attend(), x, y, CE, batch_size=32, verbose=False)
    if result.kind == "edge":
        assert "attention" in result.rule
        assert result.suggested_lr == pytest.approx(rules.ATTENTION_SHARE * result.edge_lr)


@pytest.mark.slow
def test_near_the_edge_trains_better_than_a_third_of_it():
    """A tanh MLP on the digits, plain SGD for 600 steps (the issue's kind of task; a grid of
    rates trains best at 5.6 there): the edge rule's suggestion ends lower than the steepest
    rule's."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32)
    x = (x - x.mean(0)) / x.std(0).clamp_min(1.0)
    y = torch.tensor(d.target)
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True,
                        generator=torch.Generator().manual_seed(0))

    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10))

    result = find_learning_rate(net(), loader, None, CE, verbose=False)
    steepest = choose_lr(result.lrs, result.smoothed_losses, 10, result.losses).lr
    assert result.kind == "edge" and result.suggested_lr > 1.3 * steepest

    def final_loss(lr):
        model, g = net(), torch.Generator().manual_seed(1)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for step in range(600):
            idx = torch.randint(0, len(x), (64,), generator=g)
            opt.zero_grad()
            CE(model(x[idx]), y[idx]).backward()
            opt.step()
        with torch.no_grad():
            return CE(model(x), y).item()

    at_edge, at_steepest = final_loss(result.suggested_lr), final_loss(steepest)
    assert math.isfinite(at_edge) and at_edge < 0.8 * at_steepest


class _RunningSum(nn.Module):
    """An LSTM read at its last step, regressing a weighted running sum (targets of spread ~9)."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(4, 32, batch_first=True)
        self.head = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0][:, -1])


def test_a_sweep_whose_loss_never_went_down_is_probed_and_its_rate_trains():
    """Under Adam, one step at each rate moves this LSTM too little for its regression loss
    (~80, batches scattering by +-20%) to fall below its first points anywhere in the sweep:
    the curve shows nothing to read, so trainings at fixed rates from the sweep's last rate
    down choose, and the rate they choose trains."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2048, 20, 4, generator=g)
    y = (x[:, :, 0] * torch.linspace(0.2, 1.0, 20)).sum(1, keepdim=True) * 3
    loader = lambda: DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True,  # noqa: E731
                                generator=torch.Generator().manual_seed(0))
    torch.manual_seed(2)
    model = _RunningSum()
    bare = find_learning_rate(model, loader(), None, nn.MSELoss(), optimizer="adam",
                              probes=False, verbose=False)
    assert bare.suggested_lr is None and bare.rule == "the loss never went down"
    found = find_learning_rate(model, loader(), None, nn.MSELoss(), optimizer="adam",
                               verbose=False)
    assert found.kind == "probed" and found.rule.startswith("probed: the loss never went down")
    assert found.probes[0][0] == pytest.approx(10.0) and found.probe_steps >= 50 * 4
    opt = torch.optim.Adam(model.parameters(), lr=found.suggested_lr)
    untrained = nn.functional.mse_loss(model(x), y).item()
    for (xb, yb), _ in zip(itertools.cycle(loader()), range(200)):
        opt.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
    with torch.no_grad():
        assert nn.functional.mse_loss(model(x), y).item() < 0.05 * untrained


def test_an_adam_sweep_whose_cap_bound_is_probed_below_it_and_its_rate_trains_better():
    """Under Adam this small ReLU network's sweep falls fastest above the edge / ADAPTIVE_CAP,
    so the cap bound: a share read off other tasks. Trainings of 100 steps from the cap down
    chose half of it, and over 1500 steps that rate ends at about half the cap's loss."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2048, 12, generator=g)
    torch.manual_seed(7)
    teacher = nn.Sequential(nn.Linear(12, 40), nn.Tanh(), nn.Linear(40, 5))
    with torch.no_grad():
        y = teacher(x).argmax(1)
    loader = lambda: DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True,  # noqa: E731
                                generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 5))
    init = copy.deepcopy(model.state_dict())
    found = find_learning_rate(model, loader(), None, nn.CrossEntropyLoss(), optimizer="adam",
                               verbose=False)
    cap = found.edge_lr / rules.ADAPTIVE_CAP
    assert found.kind == "probed" and found.rule.startswith("probed: steepest: the sweep ran")
    assert found.probe_steps == rules.CAPPED_PROBES * rules.CAPPED_PROBE_STEPS
    assert [lr for lr, _ in found.probes] == pytest.approx([cap / 2 ** k for k in range(4)])
    assert found.suggested_lr < cap

    def trained(lr: float) -> float:
        model.load_state_dict(init)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        for (xb, yb), _ in zip(itertools.cycle(loader()), range(1500)):
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
        with torch.no_grad():
            return nn.functional.cross_entropy(model(x), y).item()
    assert trained(found.suggested_lr) < 0.75 * trained(cap)
