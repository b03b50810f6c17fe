"""lesson.checks.lr_suggestion's parts at their edges, on hand-made curves and probes: the
parabola's vertex, the centred median, where a fall starts, when one step is past the edge,
how many rates a flat sweep's probes try, a sweep that never went down (PROBED), the probes'
patience, ties and messages, and the guards of choose_lr and the EDGE rule."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lesson.checks import lr_suggestion as S


def test_the_vertex_is_the_parabolas_bottom_in_log_lr():
    log_lr = np.linspace(-4, 0, 41)
    curve = (log_lr - math.log10(0.03)) ** 2
    i = int(np.argmin(curve))
    assert S._vertex(curve, log_lr, i) == pytest.approx(0.03, rel=1e-6)


def test_the_vertex_is_kept_within_the_points_it_was_fitted_to():
    log_lr = np.linspace(-4, 0, 41)
    curve = (log_lr + 5.0) ** 2                   # its bottom lies before the first rate
    assert S._vertex(curve, log_lr, 0) == pytest.approx(1e-4)


def test_the_centred_median_takes_fewer_neighbours_at_the_ends():
    out = S._centred_median(np.array([5.0, 1.0, 1.0, 1.0, 9.0]), 3)
    assert out.tolist() == [3.0, 1.0, 1.0, 1.0, 5.0]


def test_a_fall_starts_after_the_last_point_inside_the_plateaus_band():
    plateau, drop = 1.0, 0.5
    edge = plateau - S.FALL_BAND * drop                 # on the band's edge: out of it
    curve = np.array([1.0, 1.0, 1.0, 0.99, edge, 0.7, 0.5])
    assert S._fall_start(curve, 0, 6, plateau, drop) == 4
    curve[4] = edge + 1e-9                               # just inside: the fall starts after
    assert S._fall_start(curve, 0, 6, plateau, drop) == 5


@pytest.mark.parametrize("times, past", [(10.5, True), (9.5, False)])
def test_one_step_is_past_the_edge_beyond_ten_times_the_falls_scatter(times, past):
    """A steady fall with a zigzag of +-0.01 (second differences of 0.04 around it), then one
    step above the plateau by `times` x that scatter."""
    fall = [2.0 - 0.1 * k + (0.01 if k % 2 else -0.01) for k in range(8)]
    scatter = float(np.median(np.abs(np.diff(np.array(fall[1:]), 2))))
    plateau = 2.0
    raw = np.array(fall + [plateau + times * scatter, 1.0, 1.0])
    assert bool(S._past_edge(raw, 8, 2, plateau)) is past


def test_the_scatter_is_read_from_the_step_before_the_fall_on():
    """From the step before the fall's start (index 1 here), the second differences are 10, 1
    and 0 (median 1); from the start itself they would be 1 and 0 (median 0.5). A step 7
    above the plateau is then within ten times the scatter; 11 above is not."""
    raw = np.array([0.0, 1.0, 1.0, 11.0, 22.0, 33.0, 47.0, 0.0])
    assert not S._past_edge(raw, 6, 2, 40.0)
    raw[6] = 51.0
    assert S._past_edge(raw, 6, 2, 40.0)


def test_a_flat_sweep_is_probed_at_eight_rates_then_longer():
    seen: list[tuple[float, int]] = []

    def probe(lr: float, steps: int) -> float:
        seen.append((lr, steps))
        return 1.0                                          # nothing ever moves

    result = S.flat_probe_rule(1.0, probe, untrained=1.0)
    assert result.lr is None
    assert [steps for _, steps in seen] == [50] * 8 + [150] * 8 + [450] * 8
    assert sorted({lr for lr, _ in seen}, reverse=True)[:1] == [2.0] and len({lr for lr, _ in seen}) == 8


def test_choose_lr_needs_three_points_after_the_first_ones():
    lrs = list(np.logspace(-4, 0, 13))
    loss = [1.0] * 13
    assert S.choose_lr(lrs, loss, skip_start=10).reason != "too few points after the first ones"
    short = S.choose_lr(lrs[:12], loss[:12], skip_start=10)
    assert short.lr is None and short.reason == "too few points after the first ones"


def test_the_edge_rule_refuses_a_loss_of_zero():
    lrs = list(np.logspace(-4, 0, 40))
    raw = [1.0] * 20 + [0.0] + [1.0] * 19
    result = S.edge_rule(lrs, raw, 10)
    assert result.lr is None and "reached 0" in result.reason


def test_a_rebound_after_the_minimum_does_not_move_where_the_fall_started():
    plateau, drop = 1.0, 0.5
    curve = np.array([1.0, 1.0, 1.0, 0.8, 0.6, 0.5, 1.0])     # the minimum at 5, then back up
    assert S._fall_start(curve, 0, 5, plateau, drop) == 3


def test_exactly_ten_times_the_scatter_is_not_past_the_edge():
    raw = np.array([0.0, 1.0, 1.0, 11.0, 22.0, 33.0, 50.0, 0.0])   # scatter 1, spike 10
    assert not S._past_edge(raw, 6, 2, 40.0)


def test_a_probe_that_only_reaches_the_moved_bar_has_not_moved():
    untrained = 2.0
    bar = untrained * math.exp(-S.MIN_FALL)
    assert S.flat_probe_rule(1.0, lambda lr, steps: bar, untrained).lr is None
    assert S.flat_probe_rule(1.0, lambda lr, steps: bar * 0.999, untrained).lr is not None


def _no_fall_sweep() -> tuple[list[float], list[float]]:
    """A sweep to 10 whose loss never went below its first point: one step at each rate moved
    nothing, the batches scatter around 1."""
    lrs = list(np.logspace(-7, 1, 100))
    raw = [0.8] + [1.0 + 0.1 * math.sin(3 * i) for i in range(1, 100)]
    return lrs, raw


def _bowl(best: float, seen: list[tuple[float, int]]) -> S.Probe:
    """A probe whose training goes furthest at `best` and less the further a rate is from it
    (in log), and diverges 100x above it."""
    def probe(lr: float, steps: int) -> float:
        seen.append((lr, steps))
        return math.inf if lr > 100 * best else 0.1 + 0.2 * abs(math.log10(lr / best))
    return probe


@pytest.mark.parametrize("adaptive", [True, False])
def test_a_sweep_that_never_went_down_is_probed_from_its_last_rate_down(adaptive):
    lrs, raw = _no_fall_sweep()
    seen: list[tuple[float, int]] = []
    found = S.choose_lr(lrs, S.smooth(raw), 10, raw, adaptive=adaptive, plain_sgd=not adaptive,
                        probe=_bowl(0.04, seen))
    assert found.kind == "probed" and 0.04 / 2 <= found.lr <= 0.04 * 2
    assert found.reason.startswith("probed: the loss never went down in the sweep, one step "
                                   "at each rate up to 10; trainings of 50 steps")
    assert seen[0] == (10.0, 50) and found.probes[0] == (10.0, math.inf)
    # descending stops once PROBE_PATIENCE rates in a row fell short of the best's progress,
    # long before the 16th rate
    scores = [score for _, score in found.probes]
    best, untrained = min(scores), float(np.median(raw[:10]))
    assert all(not S._kept(v, best, untrained) for v in scores[-S.PROBE_PATIENCE:])
    assert S._kept(scores[-S.PROBE_PATIENCE - 1], best, untrained)
    assert len(seen) < S.NO_FALL_PROBE_RATES


def test_a_sweep_that_never_went_down_without_probes_or_with_attention_gets_no_rate():
    lrs, raw = _no_fall_sweep()
    bare = S.choose_lr(lrs, S.smooth(raw), 10, raw, adaptive=True)
    assert bare.lr is None and bare.reason == "the loss never went down"
    seen: list[tuple[float, int]] = []
    attention = S.choose_lr(lrs, S.smooth(raw), 10, raw, adaptive=True, attention=True,
                            probe=_bowl(0.04, seen))
    assert attention.lr is None and seen == []


def test_a_sweep_that_never_went_down_is_probed_down_sixteen_rates_at_most():
    seen: list[tuple[float, int]] = []

    def lower_is_better(lr: float, steps: int) -> float:
        seen.append((lr, steps))
        return 0.5 + 0.1 * math.log10(lr / 3e-4)            # 0.95 at 10, 0.5 at 3e-4

    result = S.no_fall_probe_rule(10.0, lower_is_better, untrained=1.0)
    rates = sorted({lr for lr, _ in seen}, reverse=True)
    assert len(rates) == S.NO_FALL_PROBE_RATES and rates[0] == 10.0
    assert rates[-1] == pytest.approx(10.0 / 2 ** 15)
    # still improving at the last: the suggestion is among the lowest rates probed
    assert result.kind == "probed" and result.lr < 1e-3


def _scripted(scores: list[float], seen: list[float]) -> S.Probe:
    """A probe that answers `scores` in the order it is called (and inf after them)."""
    answers = iter(scores)

    def probe(lr: float, steps: int) -> float:
        seen.append(lr)
        return next(answers, math.inf)
    return probe


def _edge(at: float = 1.0) -> S.Suggestion:
    return S.Suggestion(0.9 * at, "edge", "edge", at)


def test_a_probe_that_ends_at_the_untrained_loss_did_not_train():
    seen: list[float] = []
    result = S.probe_rule(_edge(), _scripted([1.0, 0.2], seen), untrained=1.0)
    assert result.lr is None and seen == [0.5] and "did not bring the loss below" in result.reason


def test_a_probe_tying_the_best_does_not_restart_the_patience():
    # best 0.5; 0.9 falls short (1 of 2); 0.5 ties the best without beating it; 0.9 falls
    # short again (2 of 2): probing stops before the fifth rate, whose 0.1 is never seen
    seen: list[float] = []
    result = S.probe_rule(_edge(), _scripted([0.5, 0.9, 0.5, 0.9, 0.1], seen), untrained=1.0)
    assert seen == [0.5, 1.0, 2.0, 4.0]
    assert result.lr == 2.0            # the largest that made 90% of the best fall


def test_the_probes_say_the_bar_they_were_held_to():
    # best 0.2 from 1.0: 90% of the fall is 0.28, twice the best 0.4: the bar is 0.28
    result = S.probe_rule(_edge(), _scripted([0.2, 0.27, 0.29, 0.9, 0.9], []), untrained=1.0)
    assert result.lr == 1.0 and "(to 0.28 or lower)" in result.reason
    # best 0.05 from 1.0: 90% of the fall is 0.145, twice the best 0.1: the bar is 0.1
    result = S.probe_rule(_edge(), _scripted([0.05, 0.09, 0.11, 0.9, 0.9], []), untrained=1.0)
    assert result.lr == 1.0 and "(to 0.1 or lower)" in result.reason


def test_probing_down_a_tie_with_the_best_does_not_restart_the_patience():
    seen: list[float] = []
    result = S.flat_probe_rule(1.0, _scripted([0.5, 0.9, 0.5, 0.9, 0.1], seen), untrained=1.0)
    assert seen == [2.0, 1.0, 0.5, 0.25] and result.lr == 2.0


def test_probing_down_lists_the_rates_that_trained_and_says_when_the_top_one_won():
    top = S.flat_probe_rule(1.0, _scripted([0.5, 1.0, 0.52, 0.9], []), untrained=1.0)
    assert top.lr == 2.0 and "(the highest probed" in top.reason
    assert "to 2: 0.5, 0.5: 0.52:" in top.reason       # 1.0 at 1 did not train: not listed
    lower = S.flat_probe_rule(1.0, _scripted([0.9, 0.5, 0.9, 0.9], []), untrained=1.0)
    assert lower.lr == 1.0 and "highest probed" not in lower.reason


def test_probing_down_that_moved_nothing_says_the_rates_it_tried():
    result = S.flat_probe_rule(1.0, lambda lr, steps: 1.0, untrained=1.0)
    assert "from 2 down to 0.0156 brought the loss" in result.reason
    result = S.no_fall_probe_rule(10.0, lambda lr, steps: 1.0, untrained=1.0)
    assert "from 10 down to 0.000305 brought the loss" in result.reason


def _fall(plateau: int, fall: list[float], after: list[float]) -> list[float]:
    """A sweep's loss: flat at 1 for `plateau` points, then `fall`, then `after`."""
    return [1.0] * plateau + fall + after


def test_a_minimum_at_the_first_point_read_has_no_fall_before_it():
    lrs = list(np.logspace(-4, 0, 30))
    loss = [2.0] * 10 + [0.5] + [1.0] * 19            # lowest exactly at skip_start
    assert S.steepest_rule(lrs, loss, 10, loss) == (None, None)


def test_a_fall_in_one_step_is_read_and_its_edge_is_its_minimum():
    lrs = list(np.logspace(-4, 0, 40))
    loss = _fall(25, [0.2], [0.6] * 14)               # the whole fall between two points
    lr, edge = S.steepest_rule(lrs, loss, 10, loss)
    assert edge == lrs[25] and lr == pytest.approx(min(lrs[24], lrs[25] / S.STEEPEST_CAP))


def test_a_spike_from_half_the_fall_on_is_the_edge():
    lrs = list(np.logspace(-4, 0, 40))
    smoothed = _fall(20, [0.9, 0.7, 0.5, 0.4, 0.35, 0.3, 0.25, 0.2], [0.8] * 12)
    # the smoothed loss passes half its drop (0.6) at 22; the raw loss is back above the
    # plateau at 22 and 23, two in a row: the edge is 22, though the loss falls on to 27
    raw = list(smoothed)
    raw[22] = raw[23] = 1.2
    assert S.steepest_rule(lrs, smoothed, 10, raw)[1] == lrs[22]
    # the same two steps before half the drop are batch scatter, not the edge
    raw = list(smoothed)
    raw[20] = raw[21] = 1.2
    assert S.steepest_rule(lrs, smoothed, 10, raw)[1] == lrs[27]


# -- an adaptive optimizer's STEEPEST where the cap bound: probed below the cap ---------------------
def _late_fall_sweep() -> tuple[list[float], list[float]]:
    """A sweep flat at 2.0 that falls only in the half decade before its edge (its minimum,
    0.2), then blows up: its steepest descent (~0.1) lies above the edge / ADAPTIVE_CAP."""
    lrs = np.logspace(-5, 0, 100)
    fall = np.clip((np.log10(lrs) - math.log10(0.06)) / math.log10(0.2 / 0.06), 0, 1)
    raw = np.where(lrs <= 0.2, 2.0 - 1.5 * fall, 0.5 * (lrs / 0.2) ** 4)
    return lrs.tolist(), raw.tolist()


def _capped(**kw) -> tuple[S.Suggestion, list[tuple[float, int]]]:
    lrs, raw = _late_fall_sweep()
    seen: list[tuple[float, int]] = []
    kw.setdefault("adaptive", True)
    found = S.choose_lr(lrs, S.smooth(raw), 10, raw, probe=kw.pop("probe", None)
                        or _bowl(0.01, seen), **kw)
    return found, seen


def test_the_late_fall_sweeps_steepest_descent_lies_above_the_adaptive_cap():
    lrs, raw = _late_fall_sweep()
    lr, edge = S.steepest_rule(lrs, S.smooth(raw), 10, raw, cap=S.ADAPTIVE_CAP)
    assert lr == pytest.approx(edge / S.ADAPTIVE_CAP) and 0.1 < edge < 0.4


def test_an_adaptive_sweep_whose_cap_bound_is_probed_down_from_the_cap():
    found, seen = _capped()
    cap = found.edge / S.ADAPTIVE_CAP
    assert seen == [(cap / 2 ** k, S.CAPPED_PROBE_STEPS) for k in range(S.CAPPED_PROBES)]
    # the bowl's bottom is 0.01: the probe nearest it, whichever side, ended lowest
    best = min(seen, key=lambda p: abs(math.log(p[0] / 0.01)))[0]
    assert found.kind == "probed" and found.lr == best and found.lr < cap
    assert found.probes == tuple((lr, 0.1 + 0.2 * abs(math.log10(lr / 0.01))) for lr, _ in seen)
    assert found.reason.startswith("probed: steepest: the sweep ran an adaptive optimizer")
    assert f"which bound ({cap:.3g}" in found.reason and f"ended at {found.lr:.3g}" in found.reason


@pytest.mark.parametrize("kw", [{"adaptive": False}, {"attention": True}, {"probe": None}])
def test_only_an_adaptive_sweep_without_attention_and_with_a_way_to_train_is_probed(kw):
    found, seen = _capped(**kw) if kw != {"probe": None} else (None, [])
    if found is None:
        lrs, raw = _late_fall_sweep()
        found = S.choose_lr(lrs, S.smooth(raw), 10, raw, adaptive=True)
    assert seen == [] and found.kind == "steepest"


def test_an_adaptive_sweep_below_its_cap_is_not_probed():
    lrs, raw = _late_fall_sweep()
    early = np.where(np.array(lrs) < 1e-3, 2.0, 0.5)            # falls at 1e-3, far below
    raw = [float(min(a, b)) if lr <= 0.2 else a for a, b, lr in zip(raw, early, lrs)]
    seen: list[tuple[float, int]] = []
    found = S.choose_lr(lrs, S.smooth(raw), 10, raw, adaptive=True, probe=_bowl(0.01, seen))
    assert seen == [] and found.kind == "steepest" and found.lr < found.edge / S.ADAPTIVE_CAP


def test_probes_below_the_cap_that_never_trained_leave_the_cap():
    found, _ = _capped(probe=lambda lr, steps: 2.0 if lr < 0.02 else math.inf)
    assert found.kind == "steepest" and found.lr == pytest.approx(found.edge / S.ADAPTIVE_CAP)
    assert "no training of 100 steps from there down brought the loss below" in found.reason


def test_nothing_skipped_reads_the_untrained_loss_off_the_first_point():
    lrs, raw = _late_fall_sweep()
    raw[0] = 2.5                                 # the rest of the plateau sits at 2.0
    found = S.choose_lr(lrs, S.smooth(raw), 0, raw, adaptive=True, probe=_bowl(0.01, []))
    assert found.kind == "probed" and "took the loss from 2.5 to" in found.reason


@pytest.mark.parametrize("classification, read", [
    (True, "the log of the smoothed loss (a classifier's)"), (False, "the smoothed loss,")])
def test_steepest_says_which_loss_it_read(classification, read):
    lrs, raw = _late_fall_sweep()
    found = S.choose_lr(lrs, S.smooth(raw), 10, raw, classification=classification)
    assert found.kind == "steepest" and f"the steepest descent of {read}" in found.reason
