"""The ten bugs a reviewer planted that the suite let through (issue 33), each now caught.

Every test here asserts what the code exists for, not how it is written: a pickle from the
sandbox that must not run on the grader, a deny list under a folder the sandbox may otherwise
read, a rule's condition that alone keeps a false alarm away, a threshold's edge. Each one was
checked against its mutant (the line named in its docstring changed as described): the test
fails on the mutant and passes on the code.
"""
from __future__ import annotations

import os
import pickle
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from lesson.checks.gradcheck import ParamCheck, findings_for, numerical_gradient_check
from lesson.course.grading import wire
from lesson.course.grading.answers import tampering
from lesson.data.validate import validate_data
from lesson.debugger import rules
from lesson.debugger.rules import Evidence, ModeEvidence, Thresholds

TH = Thresholds()


# -- 1. wire.py: the grader unpickles only plain data -------------------------------------------
class _Payload:
    """A pickle that, when loaded, creates a folder: proof that code ran on the loading side."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


@pytest.mark.parametrize("writer", ["pickle", "torch.save"])
def test_a_pickle_payload_from_the_sandbox_never_runs_on_the_grader(tmp_path, writer):
    """Mutant: `wire.loads` with `weights_only=False`. torch then unpickles the payload (the
    folder appears) before any error; `pytest.raises(Exception)` alone could not tell."""
    marker = tmp_path / "payload-ran"
    if writer == "pickle":
        data = pickle.dumps(_Payload(marker), protocol=2)
    else:
        buffer = __import__("io").BytesIO()
        torch.save({"ok": True, "x": _Payload(marker)}, buffer)
        data = buffer.getvalue()
    with pytest.raises(pickle.UnpicklingError):
        wire.loads(data)
    assert not marker.exists(), "the sandbox's pickle ran code in the grader"
    assert wire.decode(wire.loads(wire.dumps(wire.encode({"ok": [1.5, "a"]})))) == {"ok": [1.5, "a"]}


# -- 2. child.py: a denied folder under a readable root stays unreadable ------------------------
def test_a_denied_course_folder_under_a_readable_root_is_refused():
    """Mutant: `may_read` ignores `deny`. A course installed under `sys.prefix` (readable for
    the libraries) would then show its solutions to the sandbox."""
    from sandbox_guard import run_guarded

    course = Path(tempfile.mkdtemp(prefix="nndebug-deny-", dir=sys.prefix))
    try:
        (course / "solutions").mkdir()
        (course / "solutions" / "answer.txt").write_text("42")
        (course / "public.txt").write_text("fine")
        result = run_guarded(deny=[str(course / "solutions")], reads=[
            str(course / "solutions" / "answer.txt"), str(course / "public.txt")])
        assert result[str(course / "solutions" / "answer.txt")].startswith("refused")
        assert result[str(course / "public.txt")] == "fine"   # the root itself stays readable
    finally:
        shutil.rmtree(course, ignore_errors=True)


# -- 3. answers.py: vars() is refused --------------------------------------------------------------
@pytest.mark.parametrize("source", [
    'import math\nvars(math)["isclose"] = lambda *a, **k: True\n',
    "import torch\n\ndef f():\n    table = vars(torch)\n    table['equal'] = lambda *a: True\n",
    "from broken_models import case\nv = vars\nv(case)['Run'] = None\n",
])
def test_vars_is_refused_by_the_static_check(source):
    """Mutant: `vars` dropped from FORBIDDEN_BUILTINS. `vars(module)` is the module's own
    namespace: writing into it patches the module without an attribute assignment."""
    reasons = tampering(source)
    assert reasons and any("vars" in r for r in reasons), reasons


# -- 4. rules.py: LR_TOO_LOW needs gradients that are not tiny ------------------------------------
def _lr_record(step: int, update_ratio: float, grad_ratio: float) -> dict:
    return {"step": step, "layers": {}, "lr": 1e-6, "loss": 1.0,
            "params": {name: {"grad_norm": grad_ratio * 2.0, "weight_norm": 2.0,
                              "update_ratio": update_ratio, "ndim": 2}
                       for name in ("0.weight", "2.weight")}}


def lr_low_evidence(loss_change: float = 0.0, update_ratio: float = 1e-6,
                    grad_ratio: float = 1e-1, steps: int = 40) -> Evidence:
    """A run whose loss changed by `loss_change` (first quarter to last), with the given
    median update/weight and gradient/weight ratios."""
    losses = [1.0] * (steps // 2) + [1.0 - loss_change] * (steps - steps // 2)
    return Evidence(losses=losses, history=[_lr_record(s, update_ratio, grad_ratio)
                                            for s in range(0, steps, 10)], steps=steps)


def test_lr_too_low_is_not_called_on_a_converged_run():
    """Mutant: the `grad_ratio > lr_low_grad_ratio` condition removed. A run at its minimum
    (tiny gradients, tiny updates, flat loss) is converged, not stuck."""
    assert [f.code for f in rules.rule_lr_too_low(lr_low_evidence(), TH)] == ["LR_TOO_LOW"]
    converged = lr_low_evidence(grad_ratio=1e-4)          # below lr_low_grad_ratio (1e-3)
    assert rules.rule_lr_too_low(converged, TH) == []


# -- 5. rules.py: EVAL_MODE_DURING_TRAINING needs a share of the passes ---------------------------
def test_a_few_eval_mode_passes_among_many_are_not_eval_mode_during_training():
    """Mutant: the `count / backwards >= mode_share` condition removed. Two passes in eval mode
    among a hundred training passes (a probe, a logging forward) are not the bug."""
    def found(count: int, backwards: int) -> list[str]:
        em = ModeEvidence(count=count, modules=["bn"], first_step=3)
        return [f.code for f in rules.rule_modes(Evidence(eval_mode_training=em,
                                                          backwards=backwards), TH)]
    assert found(60, 100) == ["EVAL_MODE_DURING_TRAINING"]
    assert found(2, 100) == []


# -- 6. rules.py: the vanishing-gradient ratio's edge ---------------------------------------------
def vanishing_evidence(ratio: float) -> Evidence:
    """Three weight layers; the first one's relative gradient is `ratio` of the last one's."""
    params = {f"{i}.weight": {"grad_norm": g, "weight_norm": 1.0, "ndim": 2, "layer": str(i)}
              for i, g in ((0, ratio * 1e-2), (1, 1e-3), (2, 1e-2))}
    rec = {"step": 5, "layers": {}, "lr": 0.1, "loss": 1.0, "params": params}
    return Evidence(history=[rec], layer_order=["0", "1", "2"], steps=6)


def test_vanishing_gradient_threshold_edge():
    """Mutant: `vanishing_ratio` 10x lower (1e-4). A ratio just under 1e-3 is vanishing, one
    just over is not."""
    edge = 1e-3            # three orders of magnitude, as Thresholds documents it
    inside = rules.rule_vanishing(vanishing_evidence(0.9 * edge), TH)
    assert [f.code for f in inside] == ["VANISHING_GRADIENT"] and inside[0].layer == "0"
    assert rules.rule_vanishing(vanishing_evidence(1.1 * edge), TH) == []


# -- 7. validate.py: labels stored as floats are classes ------------------------------------------
def test_float_coded_labels_are_read_as_classes():
    """Mutant: `_class_labels` returns None for integral floats. Labels saved as 0.0/1.0 (a
    CSV, a float tensor) then silently skip CLASS_IMBALANCE and CONFLICTING_LABELS."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((550, 4)).astype(np.float32)
    y = np.array([0.0] * 500 + [1.0] * 50, dtype=np.float32)   # 10:1 is the edge, not over
    assert validate_data(x, y) == []
    y = np.array([0.0] * 510 + [1.0] * 40, dtype=np.float32)   # 12.75:1
    found = {f.code: f for f in validate_data(x, y)}
    assert set(found) == {"CLASS_IMBALANCE"}
    assert found["CLASS_IMBALANCE"].evidence["counts"] == {"0": 510, "1": 40}
    y_float = torch.tensor([0.0, 1.0] * 275)
    x_conflict = torch.from_numpy(x.copy())
    x_conflict[1] = x_conflict[0]                              # same input, labels 0.0 and 1.0
    found = [f for f in validate_data(x_conflict, y_float) if f.code == "CONFLICTING_LABELS"]
    assert found and found[0].evidence["groups"] == 1


# -- 8. gradcheck.py: a failure needs a second direction; the finding names the layer ------------
def test_one_disagreeing_direction_is_not_a_gradient_mismatch():
    """Mutant: a tensor fails after one disagreeing direction. |theta| with theta at 1e-5 has
    a kink no piece signature sees: the first step (eps=1e-4) crosses it, the second (eps/10)
    does not, and the backward pass (sign) is right."""
    theta = np.array([1e-5, 0.7, -1.3, 0.4])
    grad = np.sign(theta)
    checks = numerical_gradient_check(lambda: float(np.abs(theta).sum()), [theta], [grad],
                                      ["w"], seed=0)
    assert checks[0].attempts == 2, "premise: the first direction crossed the kink"
    assert checks[0].passed and findings_for(checks) == []
    wrong = numerical_gradient_check(lambda: float(np.abs(theta).sum()), [theta], [-grad],
                                     ["w"], seed=0)
    assert not wrong[0].passed and wrong[0].attempts == 2   # a real bug fails twice


@pytest.mark.parametrize("name, layer", [("features.3.weight", "features.3"),
                                         ("encoder.layers.0.linear1.bias", "encoder.layers.0.linear1"),
                                         ("scale", "scale")])
def test_a_gradient_mismatch_names_the_layer_that_holds_the_tensor(name, layer):
    """Mutant: the layer taken from the wrong end of the name (`split` for `rsplit`, or the
    last part)."""
    check = ParamCheck(name, (3,), 0.5, 1.0, 2.0, passed=False, attempts=2)
    found = findings_for([check])
    assert [(f.code, f.layer, f.evidence["parameter"]) for f in found] == [
        ("GRADIENT_MISMATCH", layer, name)]


def test_a_nested_models_faulty_layer_is_named_end_to_end():
    from lesson.checks.gradcheck import gradient_check_report
    from lesson.checks.injected_bugs import BuggyLinear

    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(10, 8), nn.Tanh(),
                                        BuggyLinear(8, 8, "factor2_weight")), nn.Tanh(),
                          nn.Linear(8, 2))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 10, generator=g), torch.randint(0, 2, (16,), generator=g)
    report = gradient_check_report(model, x, y, nn.CrossEntropyLoss())
    assert report.failing == ["0.2.weight"]
    assert [f.layer for f in report.findings] == ["0.2"]


# -- 9. engine.py: thinning a long history keeps the newest record --------------------------------
@pytest.mark.parametrize("max_history", [3, 4, 7, 10])
def test_history_thinning_keeps_the_first_and_the_newest_record(max_history):
    """Mutant: the thinning drops the newest record (`history[2::2]` or `history[-2:-1]` for
    the tail). The record just made must always be the last one kept: alerts, sinks and
    `diagnose` read it as 'now'."""
    from lesson.debugger.monitor import NetworkDebugger

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    crit = nn.CrossEntropyLoss()
    with NetworkDebugger(model, opt, crit, every=1, max_history=max_history) as dbg:
        for step in range(3 * max_history + 2):
            opt.zero_grad()
            loss = dbg.criterion(model(x), y)
            loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
            steps = [r["step"] for r in dbg.history]
            assert steps[0] == 0 and steps[-1] == step, (step, steps)
            assert len(steps) <= max_history and steps == sorted(set(steps))


# -- caught before only by slow tests: now in the quick suite -------------------------------------
def test_exploding_gradient_to_weight_threshold_in_the_quick_suite():
    """Mutant: `exploding_grad_to_weight` moved (caught before only by the slow catalogue)."""
    def found(grad: float) -> list[str]:
        rec = {"step": 0, "layers": {}, "lr": 0.1, "loss": 1.0,
               "params": {"w": {"grad_norm": grad, "weight_norm": 2.0, "ndim": 2}}}
        return [f.code for f in rules.rule_exploding_gradient(Evidence(history=[rec]), TH)]
    assert found(21.0) == ["EXPLODING_GRADIENT"]       # 10.5x the weights
    assert found(19.0) == []                           # 9.5x


def test_every_step_that_lost_its_gradients_before_the_step_is_counted():
    """Mutant: the monitor's unstepped counter not counting (`+ 0`, or `= 1`). zero_grad()
    between backward() and step() leaves each step nothing to apply: PARAMS_NOT_UPDATED, with
    the number of steps it happened at."""
    from lesson.debugger.monitor import NetworkDebugger

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    before = model[0].weight.detach().clone()
    with NetworkDebugger(model, opt, nn.CrossEntropyLoss(), every=1) as dbg:
        for _ in range(5):
            loss = dbg.criterion(model(x), y)
            loss.backward()
            opt.zero_grad()                     # the bug: the gradients are gone
            opt.step()
            dbg.record_loss(loss.detach())
        assert torch.equal(model[0].weight.detach(), before)     # the symptom: nothing moved
        assert dbg.evidence().unstepped == {n: 5 for n, _ in model.named_parameters()}
        found = [f for f in dbg.diagnose() if f.code == "PARAMS_NOT_UPDATED"]
    assert found and found[0].evidence["tensors"]["0.weight"] == 5
