"""lesson.checks.lr_suggestion's parts at their edges, on hand-made curves: the parabola's
vertex, the centred median, where a fall starts, when one step is past the edge, how many
rates a flat sweep's probes try, and the guards of choose_lr and the EDGE rule."""
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
