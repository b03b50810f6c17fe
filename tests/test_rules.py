"""lesson.debugger.rules on hand-written evidence: each threshold's edge, and no alarm on healthy shapes."""
from __future__ import annotations

import dataclasses
import math

from lesson.debugger import rules
from lesson.debugger.rules import Evidence, Thresholds, loss_verdict


def test_every_threshold_is_documented():
    source = open(rules.__file__).read()
    for f in dataclasses.fields(Thresholds):
        after = source.split(f"    {f.name}:", 1)[1].splitlines()[1].strip()
        assert after.startswith('"""'), f"{f.name} has no docstring"


def test_cosine_schedule_is_not_lr_decayed_but_per_batch_steplr_is():
    steps = 200
    cosine = [(s, 0.1 * (1 + math.cos(math.pi * s / steps)) / 2) for s in range(steps)]
    assert rules.rule_lr_decayed(Evidence(lrs=cosine, steps=steps), Thresholds()) == []
    per_batch = [(s, 0.1 * 0.5 ** s) for s in range(steps)]
    found = rules.rule_lr_decayed(Evidence(lrs=per_batch, steps=steps), Thresholds())
    assert found and found[0].evidence["collapsed_at_step"] == 10


def test_overfitting_needs_validation_rising_while_training_falls():
    losses = [1.0 - 0.009 * i for i in range(100)]
    falling_val = [1.0, 0.9, 0.8, 0.75, 0.7, 0.69]
    at = [10, 30, 50, 70, 90, 100]
    assert rules.rule_overfitting(Evidence(losses=losses, val_losses=falling_val, val_at=at),
                                  Thresholds()) == []
    rising_val = [1.0, 0.8, 0.7, 0.75, 0.85, 0.95]
    found = rules.rule_overfitting(Evidence(losses=losses, val_losses=rising_val, val_at=at),
                                   Thresholds())
    assert found and found[0].evidence["best_val_index"] == 2
    flat_train = [0.5] * 100                      # both bad: not overfitting
    assert rules.rule_overfitting(Evidence(losses=flat_train, val_losses=rising_val, val_at=at),
                                  Thresholds()) == []


def test_loss_verdicts():
    assert loss_verdict([1.0]) == "NOT_ENOUGH_DATA"
    assert loss_verdict([1.0, float("nan")]) == "NAN_OR_INF"
    assert loss_verdict([1.0] * 30) == "NOT_DECREASING"
    assert loss_verdict([1.0 / (i + 1) for i in range(30)]) == "HEALTHY"
    assert loss_verdict([2.0, 0.5, 2.1, 0.4, 2.2, 0.5, 2.0, 0.6, 2.1, 0.5]) == "OSCILLATING"


def test_minibatch_noise_with_progress_is_not_lr_too_high():
    import random
    rnd = random.Random(0)
    losses = [2.0 * 0.97 ** i * (1 + 0.3 * rnd.uniform(-1, 1)) for i in range(100)]
    assert rules.rule_lr_too_high(Evidence(losses=losses), Thresholds()) == []


def test_updates_as_large_as_the_weights_are_lr_too_high_whatever_the_loss():
    rec = {"step": 0, "layers": {}, "lr": 1.0, "loss": None,
           "params": {"w": {"grad_norm": 1.0, "weight_norm": 1.0, "update_ratio": 2.0,
                            "ndim": 2}}}
    found = rules.rule_lr_too_high(Evidence(history=[rec], losses=[1.0, 0.9]), Thresholds())
    assert found and found[0].evidence["max_update_ratio"] == 2.0


def _layer(rms: float) -> dict:
    return {"kind": "Linear", "act_mean": 0.0, "act_std": rms, "act_min": -rms, "act_max": rms,
            "zero_fraction": 0.0, "dead_fraction": None, "sample_std": rms, "nonfinite": 0,
            "samples": 64}


def test_logits_that_grow_as_a_classifier_fits_are_not_exploding_activations():
    """A healthy net that fits separable data grows its logits ~100x; hidden layers must not."""
    first = {"step": 0, "loss": 2.3, "lr": 1e-3, "params": {},
             "layers": {"hidden": _layer(1.0), "logits": _layer(0.7)}}
    fitted = {"step": 200, "loss": 3e-8, "lr": 1e-3, "params": {},
              "layers": {"hidden": _layer(1.5), "logits": _layer(74.0)}}
    ev = Evidence(history=[first, fitted], steps=200, layer_order=["hidden", "logits"])
    assert not [f for f in rules.rule_activation_scale(ev, Thresholds())
                if f.code == "EXPLODING_ACTIVATIONS"]
    blown = {**fitted, "layers": {"hidden": _layer(150.0), "logits": _layer(74.0)}}
    ev = Evidence(history=[first, blown], steps=200, layer_order=["hidden", "logits"])
    found = [f for f in rules.rule_activation_scale(ev, Thresholds())
             if f.code == "EXPLODING_ACTIVATIONS"]
    assert found and found[0].layer == "hidden"


def test_a_gradient_is_not_exploding_against_weight_matrices_that_are_all_zero():
    """A zero-initialised net keeps its weight matrices at exactly 0 (no gradient reaches them)
    while its output bias learns a little: the total weight norm is that bias's, and its
    ordinary gradient is 10x it. That is symmetry (SYMMETRIC_WEIGHTS), not an explosion; the
    same ratio against weights that exist still is one."""
    def rec(step: int, w_matrix: float) -> dict:
        return {"step": step, "layers": {}, "lr": 1e-3, "loss": None,
                "params": {"0.weight": {"grad_norm": 0.0, "weight_norm": w_matrix, "ndim": 2},
                           "2.bias": {"grad_norm": 0.12, "weight_norm": 0.004, "ndim": 1}}}
    zero = [rec(s, 0.0) for s in range(0, 60, 10)]
    assert rules.rule_exploding_gradient(Evidence(history=zero), Thresholds()) == []
    tiny = [rec(s, 0.005) for s in range(0, 60, 10)]
    assert rules.rule_exploding_gradient(Evidence(history=tiny), Thresholds())
