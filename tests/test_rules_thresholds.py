"""Every threshold and condition of lesson.debugger.rules, on hand-written evidence.

A named threshold gets a case just inside its edge and one just outside; a rule with several
conditions gets a case that meets them all (it fires) and, for each condition, a case where
only that one is false (it stays quiet). The edges are written as the numbers `Thresholds`
documents, not read from it: a changed default is a changed contract and must show here.
"""
from __future__ import annotations

import math

import pytest

from lesson.debugger import rules
from lesson.debugger.rules import Evidence, ModeEvidence, Thresholds, loss_verdict

TH = Thresholds()


def codes(found) -> list[str]:
    return [f.code for f in found]


def param(grad=1.0, weight=1.0, update_ratio=None, ndim=2, layer=None, **extra) -> dict:
    p = {"grad_norm": grad, "weight_norm": weight, "update_ratio": update_ratio, "ndim": ndim,
         "nonfinite_grad": 0}
    if layer is not None:
        p["layer"] = layer
    return p | extra


def record(step=0, params=None, layers=None, lr=0.1, **extra) -> dict:
    return {"step": step, "lr": lr, "loss": 1.0, "params": params or {}, "layers": layers or {}}\
        | extra


def layer(mean=0.0, std=1.0, sample_std=None, dead=None, zero=0.0, samples=64, nonfinite=0,
          kind="Linear") -> dict:
    return {"kind": kind, "act_mean": mean, "act_std": std, "act_min": mean - std,
            "act_max": mean + std, "zero_fraction": zero, "dead_fraction": dead,
            "sample_std": std if sample_std is None else sample_std, "nonfinite": nonfinite,
            "samples": samples}


# -- loss_verdict ------------------------------------------------------------------------------
def test_verdict_needs_two_finite_losses():
    assert loss_verdict([]) == loss_verdict([1.0]) == "NOT_ENOUGH_DATA"
    assert loss_verdict([1.0, float("nan")]) == loss_verdict([float("inf"), 1.0]) == "NAN_OR_INF"
    assert loss_verdict([1.0, 0.5]) == "HEALTHY"


def test_not_decreasing_edge_is_99_percent_of_the_first_ten():
    assert loss_verdict([1.0] * 10 + [0.991] * 10) == "NOT_DECREASING"
    assert loss_verdict([1.0] * 10 + [0.989] * 10) == "HEALTHY"
    assert loss_verdict([1.0] * 19) == "HEALTHY"           # fewer than 20: not judged so
    assert loss_verdict([1.0] * 20) == "NOT_DECREASING"


def test_a_run_stuck_at_chance_is_not_decreasing_from_eight_losses_on():
    assert loss_verdict([2.0, 2.0] + [0.96] * 10, chance=1.0) == "NOT_DECREASING"
    assert loss_verdict([2.0, 2.0] + [0.94] * 10, chance=1.0) == "HEALTHY"
    assert loss_verdict([2.0] + [0.96] * 6, chance=1.0) == "HEALTHY"      # 7 < min_losses
    assert loss_verdict([2.0, 2.0] + [0.96] * 6, chance=1.0) == "NOT_DECREASING"   # 8
    assert loss_verdict([2.0, 2.0] + [0.96] * 10, chance=0.0) == "HEALTHY"
    assert loss_verdict([2.0, 2.0] + [0.96] * 10) == "HEALTHY"


def _walk(start: float, diffs: list[float]) -> list[float]:
    out = [start]
    for d in diffs:
        out.append(out[-1] + d)
    return out


def test_oscillation_amplitude_edge_is_a_tenth_of_the_loss_level():
    assert loss_verdict([1.055, 0.945] * 5) == "OSCILLATING"      # |diff| 0.11 of level 1
    assert loss_verdict([1.045, 0.955] * 5) == "HEALTHY"          # 0.09


def test_oscillation_needs_half_of_the_steps_to_change_direction():
    up, down = 0.2, -0.2
    half = _walk(1.0, [up, up, down, down, up, up, down, down, up])       # 4 of 8 turn
    fewer = _walk(1.0, [up, up, up, down, down, up, up, down, down])      # 3 of 8
    assert loss_verdict(half) == "OSCILLATING"
    assert loss_verdict(fewer) == "HEALTHY"


def test_oscillation_that_drifts_down_more_than_it_swings_is_not_oscillating():
    start = [1.0, 1.0]
    swinging = start + _walk(3.0, [-0.4, 0.2] * 4 + [-0.4])       # net 1.2 of 2.8 travelled
    drifting = start + _walk(3.0, [-0.6, 0.2] * 4 + [-0.6])       # net 2.2 of 3.8
    assert loss_verdict(swinging) == "OSCILLATING"
    assert loss_verdict(drifting) == "HEALTHY"


def test_oscillation_after_the_loss_fell_by_half_is_noise():
    tail = [1.0, 1.4] * 5                                      # last quarter averages 1.2
    assert loss_verdict([2.353] * 6 + tail) == "OSCILLATING"   # kept 49% off
    assert loss_verdict([2.449] * 6 + tail) == "HEALTHY"       # kept 51% off
    assert loss_verdict([1.4, 1.0, 1.4, 1.0]) == "HEALTHY"     # fewer than 5 recent losses


# -- NAN_OR_INF ----------------------------------------------------------------------------------
def test_nonfinite_loss_layer_gradient_or_validation_are_each_found():
    assert rules.rule_nonfinite(Evidence(losses=[1.0, 0.9]), TH) == []
    found = rules.rule_nonfinite(Evidence(losses=[1.0, 0.5, float("nan")]), TH)
    assert codes(found) == ["NAN_OR_INF"]
    assert found[0].evidence["first_nonfinite_loss_index"] == 2
    assert found[0].evidence["last_finite_loss"] == 0.5 and found[0].layer is None
    recs = [record(0, layers={"a": layer(), "b": layer()}),
            record(4, layers={"a": layer(), "b": layer(nonfinite=3), "c": layer(nonfinite=1)})]
    found = rules.rule_nonfinite(Evidence(history=recs, losses=[1.0]), TH)
    assert found[0].layer == "b" and found[0].step == 4
    grads = [record(2, params={"w": param(nonfinite_grad=1)})]
    found = rules.rule_nonfinite(Evidence(history=grads, losses=[1.0]), TH)
    assert found[0].evidence["nonfinite_grad_params"] == ["w"] and "gradients" in found[0].message
    many = [record(2, params={f"p{i}": param(nonfinite_grad=1) for i in range(12)})]
    found = rules.rule_nonfinite(Evidence(history=many, losses=[1.0]), TH)
    assert found[0].evidence["nonfinite_grad_params"] == [f"p{i}" for i in range(10)]
    found = rules.rule_nonfinite(Evidence(losses=[1.0], val_losses=[0.5, float("inf")]), TH)
    assert found[0].evidence["first_nonfinite_val_index"] == 1
    assert "validation" in found[0].message


# -- LR_TOO_HIGH ---------------------------------------------------------------------------------
def _ratio_history(ratio: float) -> list[dict]:
    return [record(s, params={"w": param(update_ratio=ratio), "v": param(update_ratio=ratio),
                              "b": param(update_ratio=100.0, ndim=1)}) for s in (0, 10)]


def test_update_ratio_edge_is_one_weight_norm_a_step():
    flat = [1.0] * 4
    assert codes(rules.rule_lr_too_high(Evidence(history=_ratio_history(1.0), losses=flat),
                                        TH)) == ["LR_TOO_HIGH"]
    assert rules.rule_lr_too_high(Evidence(history=_ratio_history(0.99), losses=flat), TH) == []


def test_updates_of_the_weights_size_that_cut_the_loss_tenfold_are_a_line_search():
    fell_tenfold = [1.0] * 4 + [0.5] * 4 + [0.09] * 4      # last quarter 0.09 < 0.1 x 1.0
    fell_less = [1.0] * 4 + [0.5] * 4 + [0.11] * 4
    assert rules.rule_lr_too_high(Evidence(history=_ratio_history(2.0), losses=fell_tenfold),
                                  TH) == []
    assert codes(rules.rule_lr_too_high(Evidence(history=_ratio_history(2.0), losses=fell_less),
                                        TH)) == ["LR_TOO_HIGH"]
    short = [1.0] * 3 + [0.01] * 4                          # 7 losses: progress not judged
    assert codes(rules.rule_lr_too_high(Evidence(history=_ratio_history(2.0), losses=short),
                                        TH)) == ["LR_TOO_HIGH"]


def test_a_loss_that_blows_up_is_lr_too_high_with_updates_over_a_hundredth():
    blown = [1.0, 2.0, 10.5]                               # over 10x the first loss
    assert codes(rules.rule_lr_too_high(Evidence(history=_ratio_history(0.011), losses=blown),
                                        TH)) == ["LR_TOO_HIGH"]
    assert rules.rule_lr_too_high(Evidence(history=_ratio_history(0.009), losses=blown), TH) == []
    assert rules.rule_lr_too_high(Evidence(history=_ratio_history(0.011),
                                           losses=[1.0, 2.0, 9.5]), TH) == []
    assert codes(rules.rule_lr_too_high(Evidence(losses=blown), TH)) == ["LR_TOO_HIGH"]


def test_a_rising_loss_edge_is_ten_percent_over_the_first_quarter():
    rising = [1.0] * 4 + [1.05] * 4 + [1.11] * 4
    flat = [1.0] * 4 + [1.05] * 4 + [1.09] * 4
    assert codes(rules.rule_lr_too_high(Evidence(losses=rising), TH)) == ["LR_TOO_HIGH"]
    assert rules.rule_lr_too_high(Evidence(losses=flat), TH) == []
    assert rules.rule_lr_too_high(Evidence(losses=[1.0] * 3 + [1.5] * 4), TH) == []   # 7 losses


def test_a_rising_loss_while_validation_halves_is_a_moving_target():
    """A GAN generator's loss climbs to ln 2 while its samples reach the data: the training
    loss rises, the validation loss ends at half its first value or less."""
    rising = [1.0] * 4 + [1.05] * 4 + [1.11] * 4

    def high(vals):
        return codes(rules.rule_lr_too_high(Evidence(losses=rising, val_losses=vals), TH))
    assert high([1.0, 0.3, 0.5]) == []                     # ends at exactly half
    assert high([1.0, 0.3, 0.51]) == ["LR_TOO_HIGH"]       # the best does not count: the last
    assert high([0.5]) == ["LR_TOO_HIGH"]                  # one point: no trend
    assert high([1.0, float("nan"), 0.1]) == ["LR_TOO_HIGH"]
    assert high([0.0, 0.0]) == ["LR_TOO_HIGH"]
    blown = [1.0, 2.0, 10.5]                               # a blow-up is never excused
    assert codes(rules.rule_lr_too_high(Evidence(losses=blown, val_losses=[1.0, 0.1]),
                                        TH)) == ["LR_TOO_HIGH"]


def test_oscillating_without_progress_is_lr_too_high_when_jumps_are_half_the_loss():
    wild = [1.0, 1.6] * 6 + [1.0]    # |diff| 0.6 of level 1.3: 0.46 < 0.5
    wilder = [1.0, 1.8] * 6 + [1.0]  # 0.8 of 1.4: 0.57
    assert rules.rule_lr_too_high(Evidence(losses=wild), TH) == []
    assert codes(rules.rule_lr_too_high(Evidence(losses=wilder), TH)) == ["LR_TOO_HIGH"]
    falling = [3.0, 3.8] * 3 + [1.0, 1.8] * 3                # progress: not oscillation
    assert rules.rule_lr_too_high(Evidence(losses=falling), TH) == []


def test_a_loss_that_became_nan_is_lr_too_high_unless_it_had_converged():
    nan = float("nan")
    diverged = [1.0, 1.2, 1.5, nan]
    assert codes(rules.rule_lr_too_high(Evidence(history=_ratio_history(0.011),
                                                 losses=diverged), TH)) == ["LR_TOO_HIGH"]
    assert rules.rule_lr_too_high(Evidence(history=_ratio_history(0.009), losses=diverged),
                                  TH) == []
    assert rules.rule_lr_too_high(Evidence(losses=diverged), TH) == []     # no ratio known
    converged = [1.0, 0.3, 0.09, nan]          # fell tenfold to its lowest, then log(0)
    assert rules.rule_lr_too_high(Evidence(history=_ratio_history(0.011), losses=converged),
                                  TH) == []
    not_lowest = [1.0, 0.05, 0.09, nan]
    assert codes(rules.rule_lr_too_high(Evidence(history=_ratio_history(0.011),
                                                 losses=not_lowest), TH)) == ["LR_TOO_HIGH"]
    assert rules.rule_lr_too_high(Evidence(history=_ratio_history(0.011),
                                           losses=[nan, 1.0]), TH) == []


def test_lr_too_high_evidence_and_first_step():
    hist = [record(0, params={"w": param(update_ratio=0.001)}),
            record(10, params={"w": param(update_ratio=0.02)}),
            record(20, params={"w": param(update_ratio=2.0)})]
    found = rules.rule_lr_too_high(Evidence(history=hist, losses=[1.0, 1.5, 1.2],
                                            lrs=[(0, 0.5), (20, 0.7)]), TH)
    assert found[0].step == 10
    assert found[0].evidence == {"max_update_ratio": 2.0, "first_update_ratio": 0.001,
                                 "loss_first": 1.0, "loss_max": 1.5, "loss_last": 1.2, "lr": 0.7}
    # the first step's ratio (before a blow-up grows the weights) sizes the advice: 0.001 is
    # below the ratio that trains, so no factor is named
    assert "10x at a time" in found[0].advice and "expect" not in found[0].advice


def test_lr_too_high_advice_names_the_factor_the_first_ratio_asks_for():
    hist = [record(0, params={"w": param(update_ratio=1.0)}),
            record(10, params={"w": param(update_ratio=2.0)})]
    found = rules.rule_lr_too_high(Evidence(history=hist, losses=[1.0, 1.5, 1.2]), TH)
    assert found[0].evidence["first_update_ratio"] == 1.0
    assert "where about 0.01 trains, so expect about 100x" in found[0].advice


# -- LR_TOO_LOW ----------------------------------------------------------------------------------
def lr_low(loss_change=0.0, update_ratio=1e-6, grad_ratio=1e-1, steps=40, first=1.0) -> Evidence:
    losses = [first] * (steps // 2) + [first * (1 - loss_change)] * (steps - steps // 2)
    hist = [record(s, params={n: param(grad=grad_ratio * 2.0, weight=2.0,
                                       update_ratio=update_ratio) for n in ("a", "b")},
                   lr=1e-6) for s in range(0, steps, 10)]
    return Evidence(losses=losses, history=hist, steps=steps)


def test_lr_too_low_fires_when_all_three_conditions_hold():
    found = rules.rule_lr_too_low(lr_low(), TH)
    assert codes(found) == ["LR_TOO_LOW"]
    assert found[0].evidence["median_update_ratio"] == 1e-6
    assert found[0].evidence["median_grad_to_weight"] == 0.1


@pytest.mark.parametrize("change, expected", [(0.019, ["LR_TOO_LOW"]), (0.021, []),
                                              (-0.019, ["LR_TOO_LOW"]), (-0.021, [])])
def test_lr_too_low_loss_change_edge_is_two_percent_either_way(change, expected):
    assert codes(rules.rule_lr_too_low(lr_low(loss_change=change), TH)) == expected


@pytest.mark.parametrize("ratio, expected", [(0.9e-4, ["LR_TOO_LOW"]), (1.1e-4, [])])
def test_lr_too_low_update_ratio_edge(ratio, expected):
    assert codes(rules.rule_lr_too_low(lr_low(update_ratio=ratio), TH)) == expected


@pytest.mark.parametrize("ratio, expected", [(1.1e-3, ["LR_TOO_LOW"]), (0.9e-3, [])])
def test_lr_too_low_gradient_edge(ratio, expected):
    assert codes(rules.rule_lr_too_low(lr_low(grad_ratio=ratio), TH)) == expected


def test_lr_too_low_needs_sixteen_finite_losses_a_loss_above_zero_and_ratios():
    assert rules.rule_lr_too_low(lr_low(steps=15), TH) == []
    assert codes(rules.rule_lr_too_low(lr_low(steps=16), TH)) == ["LR_TOO_LOW"]
    ev = lr_low()
    ev.losses[5] = float("nan")
    assert rules.rule_lr_too_low(ev, TH) == []
    assert rules.rule_lr_too_low(lr_low(first=1e-7), TH) == []          # already at zero
    no_ratios = lr_low(update_ratio=None)
    assert rules.rule_lr_too_low(no_ratios, TH) == []
    ev = lr_low()
    ev.history = [ev.history[0]]                 # one record: judged on it
    assert codes(rules.rule_lr_too_low(ev, TH)) == ["LR_TOO_LOW"]
    ev = lr_low()
    ev.history[0] = record(0, params={"a": param(update_ratio=1.0)})   # the first is skipped
    assert codes(rules.rule_lr_too_low(ev, TH)) == ["LR_TOO_LOW"]


# -- LR_DECAYED ----------------------------------------------------------------------------------
def decayed(factor: float, at: int = 50, steps: int = 100) -> Evidence:
    lrs = [(s, 0.1 if s < at else 0.1 * factor) for s in range(steps)]
    return Evidence(lrs=lrs, steps=steps)


def test_lr_decayed_edge_is_a_thousandth_of_the_peak():
    found = rules.rule_lr_decayed(decayed(1e-3), TH)
    assert codes(found) == ["LR_DECAYED"] and found[0].step == 50
    assert found[0].evidence["steps_collapsed"] == 50
    assert rules.rule_lr_decayed(decayed(1.1e-3), TH) == []


def test_lr_decayed_must_last_a_tenth_of_the_run_and_five_steps():
    assert codes(rules.rule_lr_decayed(decayed(1e-4, at=90), TH)) == ["LR_DECAYED"]
    assert rules.rule_lr_decayed(decayed(1e-4, at=91), TH) == []        # 9 of 100 steps
    assert codes(rules.rule_lr_decayed(decayed(1e-4, at=15, steps=20), TH)) == ["LR_DECAYED"]
    assert rules.rule_lr_decayed(decayed(1e-4, at=16, steps=20), TH) == []   # 4 < 5 steps


def test_lr_decayed_needs_the_rate_to_stay_down_and_a_positive_peak():
    ev = decayed(1e-4)
    ev.lrs.append((100, 0.05))                 # back up at the end: a warm restart
    ev.steps = 101
    assert rules.rule_lr_decayed(ev, TH) == []
    assert rules.rule_lr_decayed(Evidence(lrs=[], steps=10), TH) == []
    assert rules.rule_lr_decayed(Evidence(lrs=[(s, 0.0) for s in range(50)], steps=50), TH) == []
    warmup = Evidence(lrs=[(0, 1e-6), (1, 1e-6)] + [(s, 0.1) for s in range(2, 100)], steps=100)
    assert rules.rule_lr_decayed(warmup, TH) == []        # low before the peak is a warm-up


# -- DEAD_NEURONS --------------------------------------------------------------------------------
def dead_evidence(fractions: list[float], samples: int = 64) -> Evidence:
    hist = [record(s, layers={"relu": layer(dead=f, samples=samples, zero=0.9)})
            for s, f in enumerate(fractions)]
    return Evidence(history=hist, layer_order=["relu"])


def test_dead_neurons_edge_is_half_the_units_in_each_recent_record():
    found = rules.rule_dead_neurons(dead_evidence([0.5, 0.5, 0.5]), TH)
    assert codes(found) == ["DEAD_NEURONS"] and found[0].layer == "relu"
    assert found[0].evidence["zero_fraction"] == 0.9 and found[0].step == 0
    assert rules.rule_dead_neurons(dead_evidence([0.5, 0.49, 0.5]), TH) == []


def test_dead_neurons_reads_the_last_three_records_only():
    assert codes(rules.rule_dead_neurons(dead_evidence([0.1, 0.6, 0.6, 0.6]), TH)) == [
        "DEAD_NEURONS"]
    found = rules.rule_dead_neurons(dead_evidence([0.1, 0.6, 0.6, 0.6]), TH)
    assert found[0].step == 1                  # the first record where it held


def test_dead_neurons_needs_four_samples():
    assert codes(rules.rule_dead_neurons(dead_evidence([0.9] * 3, samples=4), TH)) == [
        "DEAD_NEURONS"]
    assert rules.rule_dead_neurons(dead_evidence([0.9] * 3, samples=3), TH) == []
    assert rules.rule_dead_neurons(dead_evidence([]), TH) == []


# -- COLLAPSED_ACTIVATIONS and EXPLODING_ACTIVATIONS ---------------------------------------------
def scale_evidence(layers_now: dict, layers_first: dict | None = None) -> Evidence:
    first = record(0, layers=layers_first or layers_now)
    now = record(100, layers=layers_now)
    return Evidence(history=[first, now], layer_order=list(layers_now))


def test_collapse_edge_is_a_ten_thousandth_of_the_layers_scale():
    collapsed = scale_evidence({"a": layer(std=1.0, sample_std=0.9e-4), "out": layer()})
    found = rules.rule_activation_scale(collapsed, TH)
    assert codes(found) == ["COLLAPSED_ACTIVATIONS"] and found[0].layer == "a"
    assert rules.rule_activation_scale(
        scale_evidence({"a": layer(std=1.0, sample_std=1.1e-4), "out": layer()}), TH) == []
    by_mean = scale_evidence({"a": layer(mean=5.0, std=0.0, sample_std=4e-4), "out": layer()})
    assert codes(rules.rule_activation_scale(by_mean, TH)) == ["COLLAPSED_ACTIVATIONS"]


def test_collapse_is_not_judged_on_one_sample_a_silent_layer_or_below_a_dead_one():
    one = scale_evidence({"a": layer(sample_std=0.0, samples=1), "out": layer()})
    assert rules.rule_activation_scale(one, TH) == []
    silent = scale_evidence({"a": layer(std=0.0, sample_std=0.0), "out": layer()})
    assert rules.rule_activation_scale(silent, TH) == []
    below_dead = scale_evidence({"relu": layer(dead=1.0, std=0.0), "a": layer(sample_std=0.0),
                                 "out": layer()})
    assert rules.rule_activation_scale(below_dead, TH) == []
    above_dead = scale_evidence({"a": layer(sample_std=0.0), "relu": layer(dead=0.998),
                                 "out": layer()})
    assert codes(rules.rule_activation_scale(above_dead, TH)) == ["COLLAPSED_ACTIVATIONS"]


def test_exploding_activation_edge_is_an_rms_of_a_thousand():
    found = rules.rule_activation_scale(scale_evidence({"a": layer(std=1001.0), "out": layer()},
                                                       {"a": layer(std=1000.0),
                                                        "out": layer()}), TH)
    assert codes(found) == ["EXPLODING_ACTIVATIONS"] and found[0].layer == "a"
    assert rules.rule_activation_scale(scale_evidence({"a": layer(std=999.0), "out": layer()}),
                                       TH) == []
    output_too = scale_evidence({"a": layer(), "out": layer(std=1001.0)})   # absolute scale
    assert codes(rules.rule_activation_scale(output_too, TH)) == ["EXPLODING_ACTIVATIONS"]


def test_activations_large_from_the_start_with_idle_norms_are_told_to_call_them():
    """Weights at a variance-preserving scale, activations huge from the first record: with
    normalisation layers built and never run, the advice names them and says to call them;
    without, what adds up needs normalisation."""
    huge = {"a": layer(std=5000.0), "out": layer()}
    plain = rules.rule_activation_scale(scale_evidence(huge), TH)[0]
    assert "needs normalisation" in plain.advice
    idle = scale_evidence(huge)
    idle.never_grad, idle.layer_kinds = ["b.norm.weight"], {"b.norm": "LayerNorm", "a": "Linear"}
    advice = rules.rule_activation_scale(idle, TH)[0].advice
    assert "normalisation layers that never run (b.norm): call them in forward" in advice
    idle.layer_kinds["b.norm"] = "Dropout"                  # not a normalisation
    assert "needs normalisation" in rules.rule_activation_scale(idle, TH)[0].advice


def test_activation_growth_edge_is_a_hundredfold_above_an_rms_of_ten():
    grew = scale_evidence({"a": layer(std=101.0), "out": layer()},
                          {"a": layer(std=1.0), "out": layer()})
    assert codes(rules.rule_activation_scale(grew, TH)) == ["EXPLODING_ACTIVATIONS"]
    less = scale_evidence({"a": layer(std=99.0), "out": layer()},
                          {"a": layer(std=1.0), "out": layer()})
    assert rules.rule_activation_scale(less, TH) == []
    small = scale_evidence({"a": layer(std=9.0), "out": layer()},
                           {"a": layer(std=0.05), "out": layer()})     # 180x, but rms 9
    assert rules.rule_activation_scale(small, TH) == []
    output = scale_evidence({"a": layer(), "out": layer(std=101.0)},
                            {"a": layer(), "out": layer(std=1.0)})
    assert rules.rule_activation_scale(output, TH) == []


def test_a_blow_up_that_ended_in_nan_is_read_from_its_last_finite_record():
    """Activations that explode and then turn NaN within the recent records: the rule used to
    skip the layer, and a 10-layer net drawn at sqrt(3) times Kaiming's scale showed only
    LR_TOO_HIGH (exploding_deep)."""
    nan = float("nan")
    hist = [record(0, layers={"a": layer(std=5.0), "out": layer()}),
            record(1, layers={"a": layer(std=2000.0), "out": layer()}),
            record(2, layers={"a": layer(std=nan), "out": layer(std=nan)})]
    found = rules.rule_activation_scale(Evidence(history=hist, layer_order=["a", "out"]), TH)
    assert codes(found) == ["EXPLODING_ACTIVATIONS"] and found[0].evidence["rms"] == 2000.0
    assert found[0].step == 1                        # the record where it crossed


def test_exploding_activations_are_dated_where_they_first_crossed():
    hist = [record(s * 10, layers={"a": layer(std=std), "out": layer()})
            for s, std in enumerate([1.0, 1.0, 1500.0] + [1500.0] * 10)]
    found = rules.rule_activation_scale(Evidence(history=hist, layer_order=["a", "out"]), TH)
    assert found[0].step == 20                       # not the first of the recent records


def _init(scale: float, fan_in: int = 100, layer_name: str = "a") -> dict:
    """A weight whose rms times sqrt(fan_in) is `scale` (numel fan_in * 10)."""
    numel = fan_in * 10
    return param(weight=scale / math.sqrt(fan_in) * math.sqrt(numel), numel=numel,
                 fan_in=fan_in, layer=layer_name)


def test_weights_that_start_too_large_explode_the_activations_from_the_start():
    """Before any update acts: the report roots EXPLODING_ACTIVATIONS, not a rate too high seen
    at the first step (the weights' scale, not the rate, is what to change)."""
    from lesson.findings import Finding, sort_findings

    def run(scale):
        hist = [record(0, params={"a.weight": _init(scale)},
                       layers={"a": layer(std=800.0), "out": layer()}),
                record(1, params={"a.weight": _init(scale)},
                       layers={"a": layer(std=9000.0), "out": layer()})]
        ev = Evidence(history=hist, layer_order=["a", "out"], layer_kinds={"a": "Linear"})
        return rules.rule_activation_scale(ev, TH)[0]

    large = run(2.45)                                # sqrt(6): a uniform bound used as a std
    assert large.step is None and "start too large" in large.advice
    lr = Finding("LR_TOO_HIGH", "updates overshoot", step=0)
    assert [f.code for f in sort_findings([lr, large])] == ["EXPLODING_ACTIVATIONS", "LR_TOO_HIGH"]
    kaiming = run(1.41)
    assert kaiming.step == 1 and "start too large" not in kaiming.advice


def test_an_embedding_table_is_not_a_weight_that_starts_too_large():
    """nn.Embedding draws N(0, 1): its rms times sqrt(dim) is large, but it multiplies no input."""
    hist = [record(0, params={"emb.weight": _init(8.0, layer_name="emb")},
                   layers={"emb": layer(), "a": layer(std=5000.0), "out": layer()})]
    ev = Evidence(history=hist, layer_order=["emb", "a", "out"],
                  layer_kinds={"emb": "Embedding", "a": "Linear"})
    found = rules.rule_activation_scale(ev, TH)[0]
    assert "start too large" not in found.advice and found.evidence["weight_scale"] == 0.0


def test_activation_scale_skips_nonfinite_layers_and_runs_without_activations():
    nan = scale_evidence({"a": layer(std=float("nan")), "out": layer()})
    assert rules.rule_activation_scale(nan, TH) == []
    assert rules.rule_activation_scale(Evidence(history=[record(0)]), TH) == []


# -- VANISHING_GRADIENT --------------------------------------------------------------------------
def vanishing(ratio: float, layers: int = 3, records: int = 1) -> Evidence:
    params = {f"{i}.weight": param(grad=1e-2, layer=str(i)) for i in range(layers)}
    params["0.weight"] = param(grad=ratio * 1e-2, layer="0")
    params["0.bias"] = param(grad=1e-9, ndim=1, layer="0")          # biases do not count
    hist = [record(5 * k, params=params) for k in range(records)]
    return Evidence(history=hist, layer_order=[str(i) for i in range(layers)])


def test_vanishing_edge_is_three_orders_of_magnitude():
    found = rules.rule_vanishing(vanishing(0.9e-3), TH)
    assert codes(found) == ["VANISHING_GRADIENT"] and found[0].layer == "0"
    assert found[0].evidence["ratio"] == pytest.approx(0.9e-3)
    assert rules.rule_vanishing(vanishing(1.1e-3), TH) == []


def test_vanishing_needs_three_weight_layers_and_holds_in_each_recent_record():
    assert rules.rule_vanishing(vanishing(1e-6, layers=2), TH) == []
    assert codes(rules.rule_vanishing(vanishing(1e-6, records=3), TH)) == ["VANISHING_GRADIENT"]
    ev = vanishing(1e-6, records=3)
    healthy = vanishing(0.5).history[0]
    ev.history = [healthy] + ev.history[1:]           # one recent record without it
    assert rules.rule_vanishing(ev, TH) == []
    ev.history = [healthy] + vanishing(1e-6, records=3).history   # older than the last three
    assert codes(rules.rule_vanishing(ev, TH)) == ["VANISHING_GRADIENT"]


def test_vanishing_is_not_read_from_a_run_whose_loss_fell_twentyfold():
    """Near the minimum of a deep ReLU net the last layer's gradient dominates (a healthy
    15-layer regression under Adam reads 7e-4): a loss that fell below 5% of its start shows
    the first layers learned."""
    def run(last: float) -> Evidence:
        ev = vanishing(1e-6)
        ev.losses = [1.0] * 10 + [last] * 10
        return ev

    assert rules.rule_vanishing(run(0.049), TH) == []
    assert codes(rules.rule_vanishing(run(0.051), TH)) == ["VANISHING_GRADIENT"]
    assert codes(rules.rule_vanishing(run(1.0), TH)) == ["VANISHING_GRADIENT"]
    nan = run(0.01)
    nan.losses[-1] = float("nan")                     # a run that blew up learned nothing
    assert codes(rules.rule_vanishing(nan, TH)) == ["VANISHING_GRADIENT"]
    short = run(0.01)
    short.losses = [1.0] * 3 + [0.01] * (TH.min_losses - 4)   # too few losses to read a fall
    assert codes(rules.rule_vanishing(short, TH)) == ["VANISHING_GRADIENT"]


def test_vanishing_is_not_read_while_the_first_layer_gradient_explodes():
    """A 10-layer net that blew up (exploding_deep, CI's seed 710472916) can read 0.weight's
    relative gradient 7e6 against 20.weight's 1e12: a ratio of 5e-6, and nothing starving."""
    def run(first: float) -> Evidence:
        ev = vanishing(1e-6)
        for name, p in ev.history[0]["params"].items():
            if name.endswith("weight"):
                p["grad_norm"] = (first if name == "0.weight" else 1e12) * p["weight_norm"]
        return ev

    assert rules.rule_vanishing(run(TH.exploding_grad_to_weight * 1.01), TH) == []
    found = rules.rule_vanishing(run(TH.exploding_grad_to_weight * 0.99), TH)
    assert codes(found) == ["VANISHING_GRADIENT"]


def test_vanishing_orders_layers_by_the_forward_pass_not_by_name():
    ev = vanishing(0.9e-3)
    ev.layer_order = ["2", "1", "0"]                  # "0" is the last layer: no vanishing
    assert rules.rule_vanishing(ev, TH) == []


# -- EXPLODING_GRADIENT --------------------------------------------------------------------------
def grads(norms: list[float], weight: float = 1.0) -> Evidence:
    return Evidence(history=[record(s, params={"w": param(grad=g, weight=weight)})
                             for s, g in enumerate(norms)])


def test_exploding_gradient_to_weight_edge_is_ten():
    found = rules.rule_exploding_gradient(grads([10.5], weight=1.0), TH)
    assert codes(found) == ["EXPLODING_GRADIENT"] and found[0].step == 0
    assert rules.rule_exploding_gradient(grads([9.5], weight=1.0), TH) == []


def test_exploding_gradient_norm_edge_is_ten_thousand_whatever_the_weights():
    assert codes(rules.rule_exploding_gradient(grads([1.01e4], weight=1e4), TH)) == [
        "EXPLODING_GRADIENT"]
    assert rules.rule_exploding_gradient(grads([0.99e4], weight=1e4), TH) == []


def test_gradient_growth_edge_is_a_hundredfold_once_it_outgrows_the_weights():
    assert codes(rules.rule_exploding_gradient(grads([0.05, 5.1], weight=5.0), TH)) == [
        "EXPLODING_GRADIENT"]
    assert rules.rule_exploding_gradient(grads([0.05, 4.9], weight=5.0), TH) == []  # 98x
    assert rules.rule_exploding_gradient(grads([0.04, 4.9], weight=5.0), TH) == []  # g < w


def test_a_nonfinite_gradient_is_exploding_and_an_all_nonfinite_run_is_not_judged():
    found = rules.rule_exploding_gradient(grads([1.0, 1.0, float("inf")]), TH)
    assert codes(found) == ["EXPLODING_GRADIENT"] and found[0].step == 2
    assert rules.rule_exploding_gradient(grads([float("nan")]), TH) == []
    assert rules.rule_exploding_gradient(Evidence(), TH) == []


def test_the_suggested_clip_is_the_90th_percentile_of_calm_steps():
    calm = [1.0, 1.1, 1.2, 0.9, 1.0, 1.3, 1.05, 0.95, 1.15, 1.25, 2.5]
    found = rules.rule_exploding_gradient(grads(calm + [50.0, 400.0], weight=1.0), TH)
    # healthy: every step before the explosion within 3x the early median (2.5 is in)
    assert found[0].evidence["healthy_steps"] == 11
    assert found[0].evidence["suggested_clip"] == 1.3
    assert found[0].evidence["first_step"] == 11
    spiky = [1.0, 1.0, 1.0, 1.0, 3.5] + [50.0]        # 3.5 > 3 x 1.0: not calm
    found = rules.rule_exploding_gradient(grads(spiky), TH)
    assert found[0].evidence["healthy_steps"] == 4 and found[0].evidence["suggested_clip"] == 1.0
    found = rules.rule_exploding_gradient(grads([50.0, 60.0]), TH)
    assert found[0].evidence["suggested_clip"] == 1.0 and found[0].evidence["healthy_steps"] == 0


# -- MISSING_ZERO_GRAD ---------------------------------------------------------------------------
def stale(ratios: list[float]) -> Evidence:
    return Evidence(history=[record(s, params={"w": param(grad=1.0, stale_grad_norm=r)})
                             for s, r in enumerate(ratios)])


def test_missing_zero_grad_edge_is_a_hundredth_of_the_gradient_left_over():
    found = rules.rule_missing_zero_grad(stale([0.011, 0.011]), TH)
    assert codes(found) == ["MISSING_ZERO_GRAD"] and found[0].step == 0
    assert rules.rule_missing_zero_grad(stale([0.009, 0.009]), TH) == []


def test_missing_zero_grad_needs_half_of_two_or_more_checks():
    assert codes(rules.rule_missing_zero_grad(stale([0.5, 0.5, 0.0, 0.0]), TH)) == [
        "MISSING_ZERO_GRAD"]
    assert rules.rule_missing_zero_grad(stale([0.5, 0.0, 0.0]), TH) == []
    assert rules.rule_missing_zero_grad(stale([0.5]), TH) == []
    found = rules.rule_missing_zero_grad(stale([0.0, 0.5, 0.5]), TH)
    assert found[0].step == 1 and found[0].evidence["checks"] == 3
    zero_grad = Evidence(history=[record(s, params={"w": param(grad=0.0, stale_grad_norm=1.0)})
                                  for s in range(3)])
    assert rules.rule_missing_zero_grad(zero_grad, TH) == []


# -- PARAMS_NOT_UPDATED --------------------------------------------------------------------------
def test_unstepped_tensors_need_two_steps():
    found = rules.rule_params_not_updated(Evidence(unstepped={"2.weight": 2}), TH)
    assert codes(found) == ["PARAMS_NOT_UPDATED"] and found[0].layer == "2"
    assert found[0].evidence["tensors"] == {"2.weight": 2}
    assert rules.rule_params_not_updated(Evidence(unstepped={"2.weight": 1}), TH) == []
    foreign = rules.rule_params_not_updated(Evidence(unstepped={"unregistered tensor [3]": 4}), TH)
    assert foreign[0].layer is None


def test_a_tensor_that_got_a_gradient_and_did_not_move_is_not_updated():
    def hist(grad: float, update: float | None, lr: float = 0.1, n: int = 2) -> Evidence:
        return Evidence(history=[record(s, lr=lr, params={"w": param(
            grad=grad, weight=1.0, update_norm=update)}) for s in range(n)])
    assert codes(rules.rule_params_not_updated(hist(1.1e-3, 0.0), TH)) == ["PARAMS_NOT_UPDATED"]
    assert rules.rule_params_not_updated(hist(0.9e-3, 0.0), TH) == []    # rounds away
    assert rules.rule_params_not_updated(hist(1.0, 1e-6), TH) == []      # it moved
    assert rules.rule_params_not_updated(hist(1.0, 0.0, lr=0.0), TH) == []
    assert rules.rule_params_not_updated(hist(1.0, 0.0, n=1), TH) == []


# -- NO_GRADIENT ---------------------------------------------------------------------------------
def test_no_gradient_needs_a_backward_pass_or_a_step():
    found = rules.rule_no_gradient(Evidence(never_grad=["1.weight", "1.bias"], backwards=3), TH)
    assert codes(found) == ["NO_GRADIENT"] and found[0].layer == "1"
    assert codes(rules.rule_no_gradient(Evidence(never_grad=["w"], optimizer_steps=1), TH)) == [
        "NO_GRADIENT"]
    assert rules.rule_no_gradient(Evidence(never_grad=["w"]), TH) == []
    assert rules.rule_no_gradient(Evidence(backwards=3), TH) == []


def test_no_gradient_on_layers_that_never_ran_says_to_call_them():
    """A layer built in __init__ and never called in forward gets no gradient: the advice is to
    call it, not the generic "remove the detach on the path to the loss"."""
    kinds = {"0": "Linear", "1.norm": "LayerNorm", "2.norm": "LayerNorm", "1.f.0": "Linear"}
    idle = Evidence(never_grad=["1.norm.weight", "1.norm.bias", "2.norm.weight"], backwards=3,
                    layer_kinds=kinds, layer_order=["0", "1.f.0#32"])
    found = rules.rule_no_gradient(idle, TH)
    assert found[0].evidence["never_run"] == ["1.norm", "2.norm"]
    assert found[0].advice.startswith("They belong to layers that never ran in forward "
                                      "(1.norm, 2.norm)")
    cut = Evidence(never_grad=["0.weight"], backwards=3, layer_kinds=kinds, layer_order=["0"])
    found = rules.rule_no_gradient(cut, TH)      # it ran: the path to the loss is cut
    assert found[0].evidence["never_run"] == [] and "detach" in found[0].advice
    many = Evidence(never_grad=[f"{i}.norm.weight" for i in range(5)], backwards=1,
                    layer_kinds={f"{i}.norm": "BatchNorm1d" for i in range(5)})
    assert "(0.norm, 1.norm, 2.norm and 2 more)" in rules.rule_no_gradient(many, TH)[0].advice


# -- EVAL_MODE_DURING_TRAINING and TRAIN_MODE_DURING_EVAL ----------------------------------------
def modes(eval_count=0, backwards=10, train_count=0, probes=None) -> list[str]:
    em = ModeEvidence(count=eval_count, modules=["bn", "drop"], first_step=1) \
        if eval_count else None
    tm = ModeEvidence(count=train_count, modules=["drop"], first_step=2) if train_count else None
    return codes(rules.rule_modes(Evidence(eval_mode_training=em, train_mode_eval=tm,
                                           backwards=backwards, stochastic_eval=probes), TH))


def test_eval_mode_during_training_edges():
    assert modes(eval_count=5, backwards=10) == ["EVAL_MODE_DURING_TRAINING"]   # half
    assert modes(eval_count=4, backwards=9) == []                                 # 44%
    assert modes(eval_count=2, backwards=2) == ["EVAL_MODE_DURING_TRAINING"]
    assert modes(eval_count=1, backwards=1) == []                                 # one pass
    assert modes(eval_count=3, backwards=0) == []


def test_train_mode_during_eval_needs_two_passes_or_every_probe_differing():
    from types import SimpleNamespace

    assert modes(train_count=2) == ["TRAIN_MODE_DURING_EVAL"]
    assert modes(train_count=1) == []

    def probe(differed, probes):
        return SimpleNamespace(differed=differed, probes=probes, max_relative_diff=0.3,
                               first_step=4)
    assert modes(probes=probe(2, 2)) == ["TRAIN_MODE_DURING_EVAL"]
    assert modes(probes=probe(2, 3)) == []
    assert modes(probes=probe(1, 1)) == []
    assert modes(train_count=2, probes=probe(2, 2)) == ["TRAIN_MODE_DURING_EVAL"]   # once


# -- SYMMETRIC_WEIGHTS ---------------------------------------------------------------------------
def test_symmetric_weights_edge_is_a_millionth_of_the_weights_scale():
    def sym(spread, scale=1.0):
        return codes(rules.rule_symmetric(Evidence(symmetric={"fc": {
            "row_spread": spread, "weight_scale": scale, "units": 8}}), TH))
    assert sym(0.9e-6) == ["SYMMETRIC_WEIGHTS"] and sym(1e-6) == ["SYMMETRIC_WEIGHTS"]
    assert sym(1.1e-6) == []
    assert sym(0.4e-6, scale=0.5) == ["SYMMETRIC_WEIGHTS"]   # relative to the scale
    assert sym(0.6e-6, scale=0.5) == []
    assert sym(0.0, scale=0.0) == ["SYMMETRIC_WEIGHTS"]      # all-zero init
    assert sym(1e-31, scale=0.0) == []


# -- OVERFITTING ---------------------------------------------------------------------------------
def overfit(vals: list[float], train_falls: bool = True) -> list[str]:
    losses = [2.0 - 0.01 * i if train_falls else 1.0 for i in range(120)]
    at = [10 * (k + 1) for k in range(len(vals))]
    return codes(rules.rule_overfitting(Evidence(losses=losses, val_losses=vals, val_at=at), TH))


def test_overfitting_fires_on_a_sustained_rise_while_training_falls():
    assert overfit([1.0, 0.5, 0.6, 0.6]) == ["OVERFITTING"]
    assert overfit([1.0, 0.5, 0.6, 0.6], train_falls=False) == []


def test_overfitting_rise_edges_relative_absolute_and_given_back():
    # best 0.5: floor = max(0.5 x 1.05, 0.5 + 0.02, 0.5 + 0.1 x gained)
    assert overfit([0.6, 0.5, 0.53, 0.53]) == ["OVERFITTING"]       # floor 0.525
    assert overfit([0.6, 0.5, 0.52, 0.52]) == []
    assert overfit([0.11, 0.1, 0.121, 0.121]) == ["OVERFITTING"]    # floor 0.12 (absolute)
    assert overfit([0.11, 0.1, 0.119, 0.119]) == []
    assert overfit([3.0, 0.5, 0.76, 0.76]) == ["OVERFITTING"]       # floor 0.75 (given back)
    assert overfit([3.0, 0.5, 0.74, 0.74]) == []


def test_overfitting_needs_two_points_after_the_best_both_above():
    assert overfit([1.0, 0.5, 0.6]) == []                             # one point after
    assert overfit([1.0, 0.5, 0.6, 0.51]) == []                       # the last one fell back
    assert overfit([1.0, 0.5, 0.51, 0.6]) == []                       # the one before was low
    assert overfit([1.0, 0.9, 0.8, 0.7]) == []
    assert overfit([1.0, 0.5, float("nan"), 0.6]) == []


# -- ZERO_GRAD_IN_ACCUMULATION -------------------------------------------------------------------
def test_zero_grad_in_accumulation_edges():
    def acc(cleared, steps):
        return codes(rules.rule_zero_grad_in_accumulation(
            Evidence(cleared_steps=cleared, accumulating_steps=steps), TH))
    assert acc([3, 7], 4) == ["ZERO_GRAD_IN_ACCUMULATION"]          # half
    assert acc([3, 7], 5) == []                                      # 40%
    assert acc([3], 1) == []                                         # one step
    assert acc([3, 7], 0) == []


# -- FROZEN_PARAMS_MOVE --------------------------------------------------------------------------
def test_frozen_params_move_edge_is_a_ten_millionth_of_the_norm():
    def frozen(steps, move):
        return rules.rule_frozen_params_move(Evidence(moved_without_grad={"0.weight": (
            steps, move)}), TH)
    found = frozen(1, 1.1e-7)
    assert codes(found) == ["FROZEN_PARAMS_MOVE"] and found[0].layer == "0"
    assert frozen(1, 0.9e-7) == [] and frozen(0, 1.0) == []


# -- LABELS_SHUFFLED -----------------------------------------------------------------------------
# Without a chance level (a regression, a loss the debugger does not know): the validation
# loss is judged against the untrained loss (the first training losses, or the first
# validation loss), and needs three validation points.
def no_signal(vals, last=0.5, n=40, start=1.0) -> list[str]:
    losses = [start] * (n // 2) + [last] * (n - n // 2)
    return codes(rules.rule_labels_without_signal(Evidence(losses=losses, val_losses=vals), TH))


def test_labels_without_signal_fire_when_validation_never_leaves_chance():
    assert no_signal([1.0, 1.05, 0.81]) == ["LABELS_SHUFFLED"]
    assert no_signal([1.0, 1.05, 0.79]) == []                 # 21% below chance once
    assert no_signal([1.0, 1.05]) == []                       # two validation points
    assert no_signal([1.0, 1.05, 0.81], last=0.79) == ["LABELS_SHUFFLED"]
    assert no_signal([1.0, 1.05, 0.9], last=0.81) == []       # training did not fit
    assert no_signal([1.0, 1.05, 0.9], n=11) == []            # too few losses
    assert no_signal([1.0, 1.05, 0.9], n=12) == ["LABELS_SHUFFLED"]
    assert no_signal([1.0, float("nan"), 0.9]) == []
    assert no_signal([0.0, 0.0, 0.0], start=0.0, last=0.0) == []


def test_labels_without_signal_measure_from_the_higher_of_chance_and_the_first_val_loss():
    assert no_signal([2.0, 1.7, 1.61]) == ["LABELS_SHUFFLED"]     # floor 0.8 x 2.0
    assert no_signal([2.0, 1.7, 1.59]) == []


# With a chance level (a classifier): every recorded validation loss at or above 0.9 x the
# chance level (the validation targets' when known), while the training loss, the mean of the
# 10 losses before a validation point, had fallen to 0.8 x the training chance level there;
# quiet when, once below chance, the validation loss still fell by 25% of its first value.
LN10 = math.log(10)


def chance_run(vals, fit=0.5, at=None, n=80, chance=LN10, val_chance=None) -> list[str]:
    """Training losses at chance for the first half of `n`, then at `fit` x chance;
    validation losses recorded at `at` (default: evenly, the last at step n)."""
    losses = [chance] * (n // 2) + [fit * chance] * (n - n // 2)
    at = at if at is not None else [n * (k + 1) // len(vals) for k in range(len(vals))]
    ev = Evidence(losses=losses, val_losses=list(vals), val_at=at, chance_loss=chance,
                  val_chance_loss=val_chance)
    return codes(rules.rule_labels_without_signal(ev, TH))


def test_a_classifier_is_judged_against_its_chance_level_not_its_untrained_loss():
    assert chance_run([LN10]) == ["LABELS_SHUFFLED"]              # one loss, at the end
    assert chance_run([LN10, 1.1 * LN10]) == ["LABELS_SHUFFLED"]  # per epoch, from epoch 1
    assert chance_run([0.9 * LN10]) == ["LABELS_SHUFFLED"]        # exactly at the margin
    assert chance_run([0.899 * LN10]) == []                       # 10.1% below chance
    assert chance_run([LN10, 0.899 * LN10, LN10]) == []           # below it once is enough
    # the untrained-loss rule's conditions no longer apply: one validation point suffices,
    # and a first validation loss far above chance is no floor
    assert chance_run([3 * LN10, 2.5 * LN10, 2.4 * LN10]) == ["LABELS_SHUFFLED"]


def test_the_validation_chance_level_is_the_validation_targets():
    assert chance_run([0.95], val_chance=1.0) == ["LABELS_SHUFFLED"]
    assert chance_run([0.89], val_chance=1.0) == []
    assert chance_run([0.89 * LN10]) == []                       # unknown: the training level


def test_the_training_loss_must_reach_eight_tenths_of_chance():
    assert chance_run([LN10], fit=0.8) == ["LABELS_SHUFFLED"]
    assert chance_run([LN10], fit=0.81) == []
    assert chance_run([LN10], fit=1.0) == []                      # never below chance


def test_the_training_level_is_the_mean_of_the_ten_losses_before_each_point():
    # at step 50 the last ten losses are all fitted (0.5 x chance); at step 44 four of
    # them are, a mean of 0.8 x chance exactly: still fitted
    assert chance_run([LN10], at=[50]) == ["LABELS_SHUFFLED"]
    assert chance_run([LN10], at=[44]) == ["LABELS_SHUFFLED"]
    assert chance_run([LN10], at=[43]) == []                     # 3 of 10: 0.85 x chance
    assert chance_run([LN10], at=[40]) == []                     # nothing fitted yet
    assert chance_run([LN10], at=[0]) == []                      # before any training loss


def test_a_validation_loss_that_keeps_falling_after_the_fit_is_not_at_chance():
    first = 10 * LN10                                            # summed over ten batches
    assert chance_run([first, 0.751 * first], at=[50, 80]) == ["LABELS_SHUFFLED"]
    assert chance_run([first, 0.749 * first], at=[50, 80]) == []
    # what it did before the fit does not count: from 2x to 1x chance while still at chance
    assert chance_run([2 * LN10, LN10, LN10], at=[20, 50, 80]) == ["LABELS_SHUFFLED"]


def test_the_chance_rule_needs_eight_finite_losses_and_a_step_per_point():
    assert chance_run([LN10], n=8) == ["LABELS_SHUFFLED"]
    assert chance_run([LN10], n=7) == []
    assert chance_run([LN10, LN10], at=[80]) == []               # steps missing
    assert chance_run([LN10, math.nan]) == []
    assert chance_run([LN10], chance=0.0) == []                  # a single class
    assert chance_run([LN10], val_chance=0.0) == []
    assert chance_run([]) == []


# -- evaluate ----------------------------------------------------------------------------------
def test_dead_units_explain_vanishing_gradients_and_no_signal_explains_overfitting():
    ev = vanishing(1e-6, records=3)
    assert codes(rules.evaluate(ev)) == ["VANISHING_GRADIENT"]
    ev.history = [h | {"layers": {"0": layer(dead=0.9)}} for h in ev.history]
    assert codes(rules.evaluate(ev)) == ["DEAD_NEURONS"]
    losses = [1.0] * 60 + [0.5] * 60
    ev = Evidence(losses=losses, val_losses=[1.0, 0.9, 0.98, 0.99], val_at=[30, 60, 90, 120])
    assert codes(rules.rule_overfitting(ev, TH)) == ["OVERFITTING"]
    assert codes(rules.evaluate(ev)) == ["LABELS_SHUFFLED"]


def test_loss_input_findings_blame_the_layer_that_computes_the_output():
    from lesson.findings import Finding

    ev = Evidence(layer_order=["0", "1", "2", "3"],
                  layer_kinds={"0": "Linear", "1": "ReLU", "2": "Linear", "3": "Dropout"})
    found = rules.blame_output_layer([Finding("DOUBLE_SOFTMAX", "x"),
                                      Finding("DEAD_NEURONS", "y"),
                                      Finding("SOFTMAX_WRONG_DIM", "z", layer="1")], ev)
    assert [f.layer for f in found] == ["2", None, "1"]
    assert found[0].evidence["output_layer"] == "2"
    assert rules.output_layer(Evidence(layer_order=["f"], layer_kinds={"f": "Flatten"})) is None


# -- found by mutation testing (benchmarks/mutate.py): edges the cases above did not reach ------
def test_mode_evidence_counts_every_pass_and_keeps_the_first():
    em = ModeEvidence()
    em.add(["bn"], step=3)
    em.add(["bn", "drop"], step=7)
    assert (em.count, em.modules, em.first_step) == (2, ["bn"], 3)


def test_three_evaluations_are_too_few_to_call_overfitting():
    assert rules.overfit_rise([0.5, 0.6, 0.6], TH) is None
    assert rules.overfit_rise([0.6, 0.5, 0.6, 0.6], TH) is not None


def test_a_short_run_is_judged_on_its_first_and_last_loss():
    """Five losses: the quarters are one loss each. This one fell by more than half before it
    swung, which is progress, not oscillation."""
    assert loss_verdict([3.0, 1.0, 1.4, 1.0, 1.45]) == "HEALTHY"
    assert loss_verdict([2.0, 1.0, 1.4, 1.0, 1.45]) == "OSCILLATING"


def test_oscillation_of_three_losses():
    assert rules.oscillation([1.0, 2.0, 1.0], 1.0) == (1.0, 1.0 / (4 / 3), 0.0)
    assert rules.oscillation([1.0, 2.0], 1.0) == (0.0, 0.0, 1.0)


def test_the_first_nonfinite_record_is_the_one_reported():
    recs = [record(4, layers={"b": layer(nonfinite=1)}),
            record(8, layers={"c": layer(nonfinite=1)}, params={"w": param(nonfinite_grad=1)})]
    found = rules.rule_nonfinite(Evidence(history=recs, losses=[1.0]), TH)
    assert (found[0].layer, found[0].step) == ("b", 4)
    assert found[0].evidence["nonfinite_grad_params"] == []


def test_two_losses_are_enough_to_see_a_blow_up():
    assert codes(rules.rule_lr_too_high(Evidence(losses=[1.0, 10.5]), TH)) == ["LR_TOO_HIGH"]
    assert rules.rule_lr_too_high(Evidence(losses=[1.0, 9.5]), TH) == []


def test_growth_from_a_silent_first_record_is_not_a_growth():
    found = rules.rule_activation_scale(scale_evidence({"a": layer(std=2000.0), "out": layer()},
                                                       {"a": layer(std=0.0), "out": layer()}), TH)
    assert found[0].evidence["growth"] == 1.0


def test_growth_counts_only_above_an_rms_of_ten():
    for rms, expected in ((10.5, ["EXPLODING_ACTIVATIONS"]), (9.5, [])):
        ev = scale_evidence({"a": layer(std=rms), "out": layer()},
                            {"a": layer(std=0.05), "out": layer()})
        assert codes(rules.rule_activation_scale(ev, TH)) == expected, rms


def test_gradient_norm_and_growth_count_at_their_edge():
    assert codes(rules.rule_exploding_gradient(grads([1e4], weight=1e4), TH)) == [
        "EXPLODING_GRADIENT"]
    assert codes(rules.rule_exploding_gradient(grads([0.05, 5.0], weight=5.0), TH)) == [
        "EXPLODING_GRADIENT"]
    assert codes(rules.rule_exploding_gradient(grads([10.0], weight=1.0), TH)) == [
        "EXPLODING_GRADIENT"]


def test_the_suggested_clip_from_two_calm_steps_is_the_larger():
    found = rules.rule_exploding_gradient(grads([1.0, 2.0, 50.0]), TH)
    assert found[0].evidence["healthy_steps"] == 2 and found[0].evidence["suggested_clip"] == 2.0


def test_frozen_params_evidence_lists_ten_tensors():
    moved = {f"{i}.weight": (1, 1e-3) for i in range(12)}
    found = rules.rule_frozen_params_move(Evidence(moved_without_grad=moved), TH)
    assert len(found[0].evidence["params"]) == 10 and len(found[0].evidence["steps_moved"]) == 10


def test_light_records_count_for_dead_units_and_records_without_a_sample_count_are_judged():
    light = [record(s, layers={"relu": layer(dead=0.8)}, full=False) for s in range(3)]
    assert codes(rules.rule_dead_neurons(Evidence(history=light, layer_order=["relu"]), TH)) == [
        "DEAD_NEURONS"]
    bare = layer(sample_std=0.0)
    del bare["samples"]
    ev = scale_evidence({"a": bare, "out": layer()})
    assert codes(rules.rule_activation_scale(ev, TH)) == ["COLLAPSED_ACTIVATIONS"]


def test_lr_too_low_skips_tensors_without_a_gradient_or_a_weight():
    ev = lr_low()
    for rec in ev.history:
        rec["params"]["none"] = param(grad=None, update_ratio=1e-6)
        rec["params"]["zero"] = param(grad=1.0, weight=0.0, update_ratio=1e-6)
    assert codes(rules.rule_lr_too_low(ev, TH)) == ["LR_TOO_LOW"]


def test_records_before_the_first_step_do_not_stop_the_search_for_unmoved_tensors():
    frozen = {"w": param(grad=1.0, weight=1.0, update_norm=0.0)}
    hist = [record(0, lr=None, params=frozen)] + [record(s, params=frozen) for s in (1, 2)]
    assert codes(rules.rule_params_not_updated(Evidence(history=hist), TH)) == [
        "PARAMS_NOT_UPDATED"]


def test_jitter_on_a_loss_that_reached_zero_is_not_oscillation():
    losses = [2.0, 1.0, 0.1] + [1e-7, 3e-7] * 6          # noise far below the start's scale
    assert loss_verdict(losses) == "HEALTHY"


def test_rms_counts_the_mean_of_the_activations():
    found = rules.rule_activation_scale(scale_evidence({"a": layer(mean=-1500.0, std=0.0,
                                                                   sample_std=1.0),
                                                        "out": layer()}), TH)
    assert codes(found) == ["EXPLODING_ACTIVATIONS"] and found[0].evidence["rms"] == 1500.0


def test_a_nonfinite_loss_is_named_in_the_message_only_when_there_is_one():
    loss = rules.rule_nonfinite(Evidence(losses=[1.0, float("nan")]), TH)
    assert "loss is NaN/Inf from record 1" in loss[0].message
    grads_only = rules.rule_nonfinite(Evidence(history=[record(2, params={"w": param(
        nonfinite_grad=1)})], losses=[1.0]), TH)
    assert "loss is NaN/Inf" not in grads_only[0].message


def test_a_small_first_loss_that_grows_tenfold_blew_up():
    assert codes(rules.rule_lr_too_high(Evidence(losses=[0.05, 0.6]), TH)) == ["LR_TOO_HIGH"]


def test_rate_and_ratio_edges_count_where_the_code_says_at_or_above():
    diverged = [1.0, 1.2, 1.5, float("nan")]
    assert codes(rules.rule_lr_too_high(Evidence(history=_ratio_history(0.01),
                                                 losses=diverged), TH)) == ["LR_TOO_HIGH"]
    assert rules.rule_lr_too_low(lr_low(grad_ratio=1e-3), TH) == []          # not above
    frozen = [record(s, params={"w": param(grad=1e-3, weight=1.0, update_norm=0.0)})
              for s in range(2)]
    assert rules.rule_params_not_updated(Evidence(history=frozen), TH) == []  # not above
    ev = scale_evidence({"a": layer(std=10.0), "out": layer()},
                        {"a": layer(std=0.05), "out": layer()})
    assert rules.rule_activation_scale(ev, TH) == []                          # rms 10: not above


def test_dead_neurons_evidence_is_the_latest_record():
    hist = [record(s, layers={"relu": layer(dead=f, samples=n, zero=0.9)})
            for s, (f, n) in enumerate([(0.6, 8), (0.7, 16), (0.8, 32)])]
    found = rules.rule_dead_neurons(Evidence(history=hist, layer_order=["relu"]), TH)
    assert found[0].evidence["dead_fraction"] == 0.8 and found[0].evidence["samples"] == 32


def test_a_layer_without_statistics_does_not_stop_the_others_being_judged():
    ev = scale_evidence({"a": layer(), "b": layer(std=2000.0), "out": layer()})
    ev.layer_order = ["missing", "a", "b", "out"]
    assert codes(rules.rule_activation_scale(ev, TH)) == ["EXPLODING_ACTIVATIONS"]


def test_only_an_entirely_dead_layer_hides_the_collapse_below_it():
    ev = scale_evidence({"relu": layer(dead=0.5), "a": layer(sample_std=0.0), "out": layer()})
    found = rules.rule_activation_scale(ev, TH)
    assert codes(found) == ["COLLAPSED_ACTIVATIONS"] and found[0].layer == "a"
    exploding_relu = scale_evidence({"relu": layer(dead=0.5, std=2000.0), "out": layer()})
    assert codes(rules.rule_activation_scale(exploding_relu, TH)) == ["EXPLODING_ACTIVATIONS"]


def test_vanishing_skips_a_record_whose_last_layer_has_no_gradient_or_a_zero_weight():
    ev = vanishing(1e-6, records=2)
    ev.history[1] = {**ev.history[1], "params": {**ev.history[1]["params"],
                                                  "2.weight": param(grad=0.0, layer="2")}}
    assert codes(rules.rule_vanishing(ev, TH)) == ["VANISHING_GRADIENT"]
    ev.history[1]["params"]["1.weight"] = param(grad=1e-2, weight=0.0, layer="1")
    assert codes(rules.rule_vanishing(ev, TH)) == ["VANISHING_GRADIENT"]


def test_the_suggested_clip_is_the_90th_percentile_of_many_calm_steps():
    calm = [1.0 + 0.01 * ((7 * i) % 62) for i in range(62)]     # 1.00 ... 1.61, shuffled
    found = rules.rule_exploding_gradient(grads(calm + [500.0]), TH)
    assert found[0].evidence["healthy_steps"] == 62
    assert found[0].evidence["suggested_clip"] == 1.6            # sorted[55] = 1.55


def test_missing_zero_grad_step_is_where_the_leftover_outgrew_a_hundredth_of_the_gradient():
    hist = [record(s, params={"w": param(grad=10.0, stale_grad_norm=st)})
            for s, st in enumerate([0.05, 0.5, 5.0])]
    found = rules.rule_missing_zero_grad(Evidence(history=hist), TH)
    assert found[0].step == 1


def test_mode_findings_name_the_first_module():
    em = ModeEvidence(count=4, modules=["bn1", "bn2"], first_step=1)
    tm = ModeEvidence(count=3, modules=["drop1", "drop2"], first_step=2)
    found = rules.rule_modes(Evidence(eval_mode_training=em, train_mode_eval=tm, backwards=4), TH)
    assert [(f.code, f.layer, f.step) for f in found] == [
        ("EVAL_MODE_DURING_TRAINING", "bn1", 1), ("TRAIN_MODE_DURING_EVAL", "drop1", 2)]


def test_overfit_rise_evidence():
    rise = rules.overfit_rise([1.0, 0.5, 0.6, 0.65], TH)
    assert rise["best_val_index"] == 1 and rise["last_val_loss"] == 0.65
    assert rise["rise"] == pytest.approx(0.15) and rise["relative_rise"] == pytest.approx(0.3)
    assert rise["sustained_points"] == 2 and rise["rise_floor"] == pytest.approx(0.55)
    assert rules.overfit_rise([1.0, 0.0, 0.2, 0.2], TH)["relative_rise"] == math.inf


def test_accumulation_evidence_lists_the_first_five_steps():
    found = rules.rule_zero_grad_in_accumulation(
        Evidence(cleared_steps=[3, 5, 7, 9, 11, 13, 15], accumulating_steps=8), TH)
    assert found[0].evidence["first_steps"] == [3, 5, 7, 9, 11] and found[0].step == 3


def test_validation_exactly_at_the_margin_still_has_no_signal():
    assert no_signal([1.0, 1.0, 0.8]) == ["LABELS_SHUFFLED"]


def test_exploding_activation_rms_counts_at_a_thousand():
    ev = scale_evidence({"a": layer(std=1000.0), "out": layer()})
    assert codes(rules.rule_activation_scale(ev, TH)) == ["EXPLODING_ACTIVATIONS"]


def test_a_negative_loss_that_swings_is_oscillating():
    assert loss_verdict([-1.0, -2.0] * 5) == "OSCILLATING"


def test_a_loss_that_starts_at_zero_has_not_blown_up():
    assert rules.rule_lr_too_high(Evidence(losses=[0.0, 0.5]), TH) == []


def test_a_loss_that_went_negative_before_nan_is_not_a_convergence():
    ev = Evidence(history=_ratio_history(0.011), losses=[1.0, 0.3, -0.5, float("nan")])
    assert codes(rules.rule_lr_too_high(ev, TH)) == ["LR_TOO_HIGH"]


def test_lr_too_low_reports_the_last_learning_rate():
    ev = lr_low()
    ev.lrs = [(0, 1e-5), (30, 1e-6)]
    assert rules.rule_lr_too_low(ev, TH)[0].evidence["lr"] == 1e-6


def test_vanishing_reads_relative_gradients_and_skips_unreadable_end_layers():
    ev = vanishing(0.9e-3)
    rec = ev.history[0]
    rec["params"]["2.weight"] = param(grad=5e-3, weight=0.5, layer="2")     # still 1e-2
    assert codes(rules.rule_vanishing(ev, TH)) == ["VANISHING_GRADIENT"]
    rec["params"]["3.weight"] = param(grad=1.0, weight=0.0, layer="3")
    rec["params"]["4.weight"] = param(grad=None, layer="4")
    ev.layer_order += ["3", "4"]
    assert codes(rules.rule_vanishing(ev, TH)) == ["VANISHING_GRADIENT"]


def test_a_first_gradient_of_zero_is_no_base_for_growth():
    assert rules.rule_exploding_gradient(grads([0.0, 1.0, 2.0]), TH) == []


def test_a_step_at_exactly_three_times_the_early_median_is_still_calm():
    found = rules.rule_exploding_gradient(grads([1.0, 1.0, 1.0, 1.0, 3.0, 50.0]), TH)
    assert found[0].evidence["healthy_steps"] == 5 and found[0].evidence["suggested_clip"] == 3.0
