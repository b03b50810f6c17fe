"""LossInputInspector: each loss-input bug is found on a broken case and never on correct ones."""
from __future__ import annotations

import functools
import gc
import json
import weakref

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from host_sync import DEVICES, no_host_sync
from lesson.debugger.loss_inputs import (BINARY_LOGITS, CLASS_LOG_PROBS, CLASS_LOGITS, REGRESSION,
                                UNKNOWN, LossInputInspector, criterion_kind)

SEEDS = [0, 1, 2]
CLASS_SHAPES = [(16, 4), (64, 10), (8, 3, 5), (2, 2)]


def codes(inspector: LossInputInspector) -> list[str]:
    found = inspector.findings(step=7)
    for f in found:  # evidence must be plain JSON-ready numbers and strings
        json.dumps(f.to_dict())
    return [f.code for f in found]


def feed(criterion, make_output, shape, *, batches=5, seed=0, target_fn=None,
         dtype=torch.float32) -> LossInputInspector:
    """Observe `batches` (output, target) pairs; output = make_output(random logits)."""
    gen = torch.Generator().manual_seed(seed)
    inspector = LossInputInspector()
    for i in range(batches):
        logits = 3 * torch.randn(shape, generator=gen)
        n_classes = shape[1] if len(shape) > 1 else shape[0]
        if target_fn is None:
            target = torch.randint(0, n_classes, (shape[0], *shape[2:]), generator=gen)
        else:
            target = target_fn(gen)
        inspector.observe(make_output(logits).to(dtype), target, criterion, step=i)
    return inspector


def own_cross_entropy(probs, target):  # a hand-written loss that expects probabilities
    return -torch.log(probs.gather(1, target[:, None])).mean()


def test_criteria_are_identified_by_type_identity_and_torch_name():
    assert criterion_kind(nn.CrossEntropyLoss()) == CLASS_LOGITS
    assert criterion_kind(F.cross_entropy) == CLASS_LOGITS
    assert criterion_kind(functools.partial(F.cross_entropy, label_smoothing=0.1)) \
        == CLASS_LOGITS
    assert criterion_kind(nn.NLLLoss()) == CLASS_LOG_PROBS
    assert criterion_kind(F.nll_loss) == CLASS_LOG_PROBS
    assert criterion_kind(nn.BCEWithLogitsLoss()) == BINARY_LOGITS
    for loss in (nn.MSELoss(), nn.L1Loss(), nn.SmoothL1Loss(), nn.HuberLoss(), F.mse_loss,
                 F.huber_loss):
        assert criterion_kind(loss) == REGRESSION

    @functools.wraps(F.nll_loss)
    def wrapped(*args, **kwargs):
        return F.nll_loss(*args, **kwargs)

    assert criterion_kind(wrapped) == CLASS_LOG_PROBS
    assert criterion_kind(own_cross_entropy) == UNKNOWN
    assert criterion_kind(lambda a, b: (a - b).pow(2).mean()) == UNKNOWN
    assert criterion_kind(None) == UNKNOWN


# -- DOUBLE_SOFTMAX ---------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", CLASS_SHAPES)
@pytest.mark.parametrize("criterion", [nn.CrossEntropyLoss(), F.cross_entropy])
def test_softmax_fed_to_cross_entropy_is_double_softmax(criterion, shape, seed):
    broken = feed(criterion, lambda z: z.softmax(1), shape, seed=seed)
    assert codes(broken) == ["DOUBLE_SOFTMAX"]
    fixed = feed(criterion, lambda z: z, shape, seed=seed)
    assert codes(fixed) == []


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_double_softmax_in_low_and_high_precision(dtype):
    assert codes(feed(nn.CrossEntropyLoss(), lambda z: z.softmax(1), (32, 10),
                      dtype=dtype)) == ["DOUBLE_SOFTMAX"]
    assert codes(feed(nn.CrossEntropyLoss(), lambda z: z, (32, 10), dtype=dtype)) == []
    # log-probabilities are a legitimate input for CrossEntropyLoss (log_softmax is idempotent)
    assert codes(feed(nn.CrossEntropyLoss(), lambda z: z.log_softmax(1), (32, 10),
                      dtype=dtype)) == []


def test_unbatched_class_vector_uses_dim_0_as_class_dim():
    inspector = LossInputInspector()
    for i in range(4):
        inspector.observe(torch.randn(5).softmax(0), torch.tensor(i % 5),
                          nn.CrossEntropyLoss())
    assert codes(inspector) == ["DOUBLE_SOFTMAX"]


def _train_classifier(make_output, criterion, seed, steps=150, n_classes=3, binary=False):
    """Train a small MLP on a separable problem, observing every step's loss inputs."""
    torch.manual_seed(seed)
    x = torch.randn(256, 6)
    if binary:
        y_all = (x[:, 0] + 0.5 * x[:, 1] > 0.3).float()[:, None]
    else:
        y_all = (x[:, :n_classes] + 0.3 * torch.randn(256, n_classes)).argmax(1)
    model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 1 if binary else n_classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    inspector = LossInputInspector()
    losses = []
    for step in range(steps):
        idx = torch.randint(0, 256, (32,))
        out = make_output(model(x[idx]))
        inspector.observe(out, y_all[idx], criterion, step=step)
        loss = criterion(out, y_all[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return inspector, losses


@pytest.mark.parametrize("seed", SEEDS)
def test_trained_logits_never_look_like_probabilities(seed):
    inspector, losses = _train_classifier(lambda z: z, nn.CrossEntropyLoss(), seed)
    assert losses[-1] < 0.5 * losses[0]  # it really trained
    assert codes(inspector) == []
    broken, broken_losses = _train_classifier(lambda z: z.softmax(1), nn.CrossEntropyLoss(),
                                              seed)
    # the symptom: the loss cannot get anywhere near 0 (its floor is log(C) - 1 + ... > 0.55)
    assert min(broken_losses) > 0.55
    assert codes(broken) == ["DOUBLE_SOFTMAX"]


@pytest.mark.parametrize("seed", SEEDS)
def test_sigmoid_fed_to_bce_with_logits(seed):
    crit = nn.BCEWithLogitsLoss()
    broken, broken_losses = _train_classifier(torch.sigmoid, crit, seed, binary=True)
    assert min(broken_losses) > 0.3  # sigmoid(sigmoid(z)) never gets below ~0.31 of loss
    assert codes(broken) == ["DOUBLE_SOFTMAX"]
    fixed, losses = _train_classifier(lambda z: z, crit, seed, binary=True)
    assert losses[-1] < 0.3
    assert codes(fixed) == []


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("head", ["linear", "linear+flatten"])
def test_logits_of_a_linear_layer_inside_0_1_are_not_sigmoid_outputs(seed, head):
    """A GAN's discriminator near equilibrium gives logits that stay inside [0, 1] batch after
    batch: they come out of a Linear layer (its autograd node), so they are raw scores; the
    same values through a sigmoid are not."""
    gen = torch.Generator().manual_seed(seed)
    layer = nn.Linear(4, 1)
    with torch.no_grad():
        layer.weight.mul_(0.02)
        layer.bias.fill_(0.5)

    def observe(make_output):
        inspector = LossInputInspector()
        for step in range(6):
            out = make_output(layer(torch.randn(32, 4, generator=gen)))
            out = out.flatten(0) if head == "linear+flatten" else out
            assert 0 <= float(out.min()) and float(out.max()) <= 1    # values alone: [0, 1]
            target = torch.ones_like(out)
            inspector.observe(out, target, nn.BCEWithLogitsLoss(), step=step)
        return codes(inspector)

    assert observe(lambda z: z) == []
    assert observe(lambda z: torch.sigmoid(4 * z - 2)) == ["DOUBLE_SOFTMAX"]


# -- SOFTMAX_WRONG_DIM --------------------------------------------------------------------------
WRONG_DIM_CASES = [
    (nn.CrossEntropyLoss(), lambda z: z.softmax(0)),
    (F.cross_entropy, lambda z: z.softmax(0)),
    (nn.NLLLoss(), lambda z: z.log_softmax(0)),
    (F.nll_loss, lambda z: z.log_softmax(0)),
    (own_cross_entropy, lambda z: z.softmax(0)),  # a hand-written loss, (N, C) only
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("criterion,make_output,shape", [
    (crit, make, shape) for crit, make in WRONG_DIM_CASES
    for shape in [(16, 4), (64, 10), (10, 10)] + ([] if crit is own_cross_entropy
                                                   else [(8, 3, 5)])])
def test_softmax_over_batch_dim_is_wrong_dim_not_double_softmax(criterion, make_output, shape,
                                                                seed):
    assert codes(feed(criterion, make_output, shape, seed=seed)) == ["SOFTMAX_WRONG_DIM"]


def test_softmax_over_batch_of_single_outputs_with_regression_losses():
    inspector = LossInputInspector()
    for _ in range(4):
        inspector.observe(torch.randn(16, 1).softmax(0), torch.rand(16, 1), nn.BCELoss())
    assert codes(inspector) == ["SOFTMAX_WRONG_DIM"]
    legit = LossInputInspector()
    for _ in range(4):
        legit.observe(torch.randn(16, 1).sigmoid(), torch.rand(16, 1), nn.BCELoss())
    assert codes(legit) == []


def test_softmax_wrong_dim_on_a_custom_loss_ignores_the_criterion():
    inspector = feed(lambda out, y: out.mean(), lambda z: z.softmax(0), (32, 5))
    assert codes(inspector) == ["SOFTMAX_WRONG_DIM"]
    evidence = inspector.findings()[0].evidence
    assert evidence["share_of_batches"] == 1.0
    assert evidence["max_column_sum_error"] < 1e-3


# -- NLL_WITHOUT_LOG_SOFTMAX ----------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", CLASS_SHAPES)
@pytest.mark.parametrize("criterion", [nn.NLLLoss(), F.nll_loss])
def test_raw_logits_fed_to_nll_loss(criterion, shape, seed):
    broken = feed(criterion, lambda z: z, shape, seed=seed)
    assert codes(broken) == ["NLL_WITHOUT_LOG_SOFTMAX"]
    assert broken.findings()[0].evidence["looks_like_probabilities"] is False
    assert codes(feed(criterion, lambda z: z.log_softmax(1), shape, seed=seed)) == []


def test_nll_loss_fed_probabilities_or_negative_logits():
    probs = feed(nn.NLLLoss(), lambda z: z.softmax(1), (32, 5))
    assert codes(probs) == ["NLL_WITHOUT_LOG_SOFTMAX"]
    assert probs.findings()[0].evidence["looks_like_probabilities"] is True
    # all values <= 0 but not log-probabilities: rows' logsumexp is far from 0
    assert codes(feed(nn.NLLLoss(), lambda z: -z.abs() - 5, (32, 5))) == [
        "NLL_WITHOUT_LOG_SOFTMAX"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_log_softmax_is_accepted_by_nll(dtype):
    assert codes(feed(nn.NLLLoss(), lambda z: z.to(dtype).log_softmax(1), (64, 100))) == []
    assert codes(feed(nn.NLLLoss(), lambda z: z, (64, 100), dtype=dtype)) == [
        "NLL_WITHOUT_LOG_SOFTMAX"]


def test_nll_symptom_loss_goes_negative_without_bound():
    torch.manual_seed(0)
    x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    inspector = LossInputInspector()
    for step in range(30):
        out = model(x)
        inspector.observe(out, y, nn.NLLLoss(), step=step)
        loss = F.nll_loss(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < -5  # a "likelihood" loss far below 0: nonsense
    assert codes(inspector) == ["NLL_WITHOUT_LOG_SOFTMAX"]
    assert inspector.findings()[0].step == 0


# -- LOSS_SHAPE_MISMATCH ------------------------------------------------------------------------
@pytest.mark.parametrize("criterion", [nn.MSELoss(), nn.L1Loss(), nn.SmoothL1Loss(),
                                       nn.HuberLoss(), F.mse_loss, F.l1_loss])
@pytest.mark.parametrize("n", [8, 33])
def test_n_by_1_prediction_against_n_target_broadcasts(criterion, n):
    inspector = LossInputInspector()
    for _ in range(3):
        inspector.observe(torch.randn(n, 1), torch.randn(n), criterion)
    assert codes(inspector) == ["LOSS_SHAPE_MISMATCH"]
    evidence = inspector.findings()[0].evidence
    assert evidence["output_shape"] == [n, 1]
    assert evidence["target_shape"] == [n]
    assert evidence["broadcast_shape"] == [n, n]
    assert evidence["calls_seen"] == 3
    fixed = LossInputInspector()
    for _ in range(3):
        fixed.observe(torch.randn(n, 1).squeeze(-1), torch.randn(n), criterion)
    assert codes(fixed) == []


def test_shape_mismatch_symptom_and_legitimate_shapes():
    # the symptom: (N, 1) vs (N,) MSE cannot fit even a perfect linear relation
    torch.manual_seed(0)
    x = torch.randn(64, 1)
    y = 3 * x[:, 0]
    model = nn.Linear(1, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    inspector = LossInputInspector()
    for _ in range(200):
        out = model(x)
        inspector.observe(out, y, nn.MSELoss())
        with pytest.warns(UserWarning):
            loss = nn.MSELoss()(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() > 5  # stuck at the variance of y: predicts the mean
    assert codes(inspector) == ["LOSS_SHAPE_MISMATCH"]

    legit = LossInputInspector()
    legit.observe(torch.randn(8, 5), torch.randint(0, 5, (8,)), nn.CrossEntropyLoss())
    legit.observe(torch.randn(8, 5, 3), torch.randint(0, 5, (8, 3)), nn.CrossEntropyLoss())
    legit.observe(torch.randn(8, 5), torch.randint(0, 5, (8,)), lambda a, b: a.sum())
    legit.observe(torch.randn(8, 5), torch.randn(8, 1), lambda a, b: (a - b).sum())
    assert codes(legit) == []


def _own_binary_cross_entropy(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Like broken_models/nan_inf/log_of_zero.py: squeezes its own (N, 1) input."""
    p = p.squeeze(1).clamp(1e-7, 1 - 1e-7)
    return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()


@pytest.mark.parametrize("criterion", [
    _own_binary_cross_entropy,
    lambda p, y: (p.squeeze(1) - y).pow(2).mean(),
    lambda p, y: (p.view(-1) - y).abs().mean(),
])
def test_unknown_criterion_that_reshapes_its_own_input_is_not_a_mismatch(criterion):
    # regression: hand-written losses got the shape check and were flagged for (N, 1) vs (N,)
    gen = torch.Generator().manual_seed(0)
    inspector = LossInputInspector()
    for _ in range(5):
        p = torch.rand(32, 1, generator=gen)
        y = (torch.rand(32, generator=gen) > 0.5).float()
        assert criterion(p, y).shape == ()  # really a per-sample loss, no broadcasting
        inspector.observe(p, y, criterion)
    assert codes(inspector) == []


@pytest.mark.parametrize("criterion", [nn.BCELoss(), nn.BCEWithLogitsLoss(), F.smooth_l1_loss,
                                       F.huber_loss, F.binary_cross_entropy,
                                       F.binary_cross_entropy_with_logits])
def test_every_known_elementwise_loss_gets_the_shape_check(criterion):
    inspector = LossInputInspector()
    inspector.observe(torch.rand(16, 1), torch.rand(16), criterion)
    assert "LOSS_SHAPE_MISMATCH" in codes(inspector)


# -- OUTPUT_RANGE_MISMATCH ----------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("head,targets,expected", [
    (torch.relu, lambda g: torch.randn(32, 1, generator=g), ["OUTPUT_RANGE_MISMATCH"]),
    (F.softplus, lambda g: torch.randn(32, 1, generator=g) - 1, ["OUTPUT_RANGE_MISMATCH"]),
    (torch.sigmoid, lambda g: 10 * torch.rand(32, 1, generator=g), ["OUTPUT_RANGE_MISMATCH"]),
    (lambda z: z, lambda g: torch.randn(32, 1, generator=g), []),
    (torch.relu, lambda g: 3 * torch.rand(32, 1, generator=g), []),
    (torch.sigmoid, lambda g: torch.rand(32, 1, generator=g), []),
    # a few stray negative targets are not a range mismatch
    (torch.relu, lambda g: torch.rand(32, 1, generator=g) - 0.02, []),
])
def test_output_range_against_targets(head, targets, expected, seed):
    inspector = feed(nn.MSELoss(), head, (32, 1), seed=seed, target_fn=targets)
    assert codes(inspector) == expected
    if expected:
        ev = inspector.findings()[0].evidence
        assert ev["output_min"] >= 0 and ev["unreachable_share"] >= 0.1


def test_relu_regression_head_symptom():
    torch.manual_seed(0)
    x = torch.randn(128, 3)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]])
    losses = {}
    for name, head in (("broken", nn.ReLU()), ("fixed", nn.Identity())):
        torch.manual_seed(1)
        model = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 1), head)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        inspector = LossInputInspector()
        for step in range(150):
            out = model(x)
            inspector.observe(out, y, nn.MSELoss(), step=step)
            loss = F.mse_loss(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        losses[name] = loss.item()
        assert codes(inspector) == (["OUTPUT_RANGE_MISMATCH"] if name == "broken" else [])
    assert losses["broken"] > 10 * losses["fixed"]  # half the targets stay out of reach


def test_range_needs_a_few_batches():
    inspector = feed(nn.MSELoss(), torch.relu, (32, 1), batches=2,
                     target_fn=lambda g: torch.randn(32, 1, generator=g))
    assert codes(inspector) == []


# -- robustness ---------------------------------------------------------------------------------
def test_odd_inputs_are_skipped_without_error():
    inspector = LossInputInspector()
    inspector.observe((torch.randn(4, 3),), torch.zeros(4), nn.CrossEntropyLoss())
    inspector.observe(torch.randint(0, 3, (4, 3)), torch.zeros(4), nn.CrossEntropyLoss())
    inspector.observe(torch.randn(0, 3), torch.zeros(0), nn.CrossEntropyLoss())
    inspector.observe(torch.tensor(1.0), torch.tensor(1.0), nn.MSELoss())
    inspector.observe(torch.randn(4, 3), None, nn.CrossEntropyLoss())
    inspector.observe(torch.randn(4, 3), [0, 1, 2, 0], "not a loss")
    assert inspector.findings() == []
    assert inspector.batches_observed == 2


def test_nonfinite_outputs_do_not_break_or_trigger():
    inspector = LossInputInspector()
    for _ in range(4):
        out = torch.randn(8, 3)
        out[0, 0] = float("nan")
        inspector.observe(out, torch.randint(0, 3, (8,)), nn.CrossEntropyLoss())
    assert codes(inspector) == []


def test_no_reference_to_user_tensors_is_kept():
    inspector = LossInputInspector()
    out, target = torch.randn(16, 4).softmax(1), torch.randint(0, 4, (16,))
    refs = [weakref.ref(out), weakref.ref(target)]
    inspector.observe(out, target, nn.CrossEntropyLoss())
    del out, target
    gc.collect()
    assert all(r() is None for r in refs)
    assert codes(inspector) == ["DOUBLE_SOFTMAX"]


def test_observe_does_not_touch_autograd_or_values():
    out = torch.randn(8, 3, requires_grad=True)
    before = out.detach().clone()
    LossInputInspector().observe(out * 1, torch.zeros(8, dtype=torch.long),
                                 nn.CrossEntropyLoss())
    assert torch.equal(out.detach(), before) and out.grad is None


def test_reset_forgets():
    inspector = feed(nn.CrossEntropyLoss(), lambda z: z.softmax(1), (8, 3))
    assert codes(inspector) == ["DOUBLE_SOFTMAX"]      # the premise: there was something to forget
    inspector.reset()
    assert inspector.findings() == []


# -- end to end: NetworkDebugger(model, optimizer, criterion).diagnose() ------------------------
def train_under_debugger(head: nn.Module, criterion, x, y, *, seed: int, out_features: int,
                         optimizer: str = "adam", steps: int = 60):
    """Train a small MLP ending in `head` under the debugger; its codes and the last loss."""
    from lesson.debugger.monitor import NetworkDebugger

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(x.shape[1], 32), nn.ReLU(), nn.Linear(32, out_features),
                          head)
    opt = (torch.optim.Adam(model.parameters(), lr=1e-2) if optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    with NetworkDebugger(model, opt, criterion) as debugger:
        loss_fn = debugger.criterion  # the watched criterion (a wrapper for plain functions)
        for _ in range(steps):
            idx = torch.randint(0, len(x), (32,))
            loss = loss_fn(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            debugger.record_loss(loss)
        return [f.code for f in debugger.diagnose()], loss.item()


def _classification(seed: int):
    gen = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(512, 8, generator=gen)
    return x, x[:, :3].argmax(1)


def _binary(seed: int):
    x, _ = _classification(seed)
    return x, (x[:, 0] + x[:, 1] > 0).float()[:, None]


def _regression(seed: int):
    x, _ = _classification(seed)
    return x, x[:, :2].sum(1, keepdim=True)


E2E_CASES = {
    # code: (broken head, fixed head, criterion, data, output features)
    "DOUBLE_SOFTMAX": (nn.Softmax(dim=1), nn.Identity(), nn.CrossEntropyLoss(),
                       _classification, 3),
    "DOUBLE_SOFTMAX/bce": (nn.Sigmoid(), nn.Identity(), nn.BCEWithLogitsLoss(), _binary, 1),
    "SOFTMAX_WRONG_DIM": (nn.Softmax(dim=0), nn.Identity(), nn.CrossEntropyLoss(),
                          _classification, 3),
    "SOFTMAX_WRONG_DIM/nll": (nn.LogSoftmax(dim=0), nn.LogSoftmax(dim=1), F.nll_loss,
                              _classification, 3),
    "NLL_WITHOUT_LOG_SOFTMAX": (nn.Identity(), nn.LogSoftmax(dim=1), nn.NLLLoss(),
                                _classification, 3),
    "OUTPUT_RANGE_MISMATCH": (nn.ReLU(), nn.Identity(), nn.MSELoss(), _regression, 1),
}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize("case", sorted(E2E_CASES))
def test_debugger_diagnoses_loss_input_bugs(case, optimizer, seed):
    broken_head, fixed_head, criterion, data, out_features = E2E_CASES[case]
    x, y = data(seed)
    code = case.split("/")[0]
    broken, _ = train_under_debugger(broken_head, criterion, x, y, seed=seed,
                                     out_features=out_features, optimizer=optimizer)
    assert code in broken
    fixed, _ = train_under_debugger(fixed_head, criterion, x, y, seed=seed,
                                    out_features=out_features, optimizer=optimizer)
    assert fixed == []


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.filterwarnings("ignore:Using a target size")
def test_debugger_diagnoses_shape_mismatch(seed):
    x, y = _regression(seed)
    broken, broken_loss = train_under_debugger(nn.Identity(), nn.MSELoss(), x, y[:, 0],
                                               seed=seed, out_features=1, steps=100)
    assert "LOSS_SHAPE_MISMATCH" in broken
    fixed, fixed_loss = train_under_debugger(nn.Identity(), F.mse_loss, x, y, seed=seed,
                                             out_features=1, steps=100)
    assert fixed == []
    assert broken_loss > 10 * fixed_loss  # the symptom: the broadcast loss cannot be fitted


def test_evidence_is_strict_json():
    inspector = LossInputInspector()
    for _ in range(3):
        inspector.observe(torch.randn(16, 1).softmax(0), torch.rand(16, 1), nn.BCELoss())
        inspector.observe(torch.randn(8, 1), torch.randn(8), nn.MSELoss())
    found = inspector.findings()
    assert sorted(f.code for f in found) == ["LOSS_SHAPE_MISMATCH", "SOFTMAX_WRONG_DIM"]
    for f in found:
        json.dumps(f.to_dict(), allow_nan=False)


@pytest.mark.parametrize("device", DEVICES)
def test_observe_never_syncs_with_the_device(device):
    """On CUDA, torch's sync debug mode raises at any host sync; on the CPU the same calls run
    under a mode that raises at every host read (item, bool, tolist, data-dependent shapes)."""
    inspector = LossInputInspector()
    out = torch.randn(64, 10, device=device)
    target = torch.randint(0, 10, (64,), device=device)
    with no_host_sync(device):
        for crit in (nn.CrossEntropyLoss(), F.nll_loss, nn.MSELoss()):
            inspector.observe(out.softmax(1), target, crit, step=1)
            inspector.observe(out[:, :1], target.float(), crit, step=2)
    assert "DOUBLE_SOFTMAX" in [f.code for f in inspector.findings()]


def test_a_diverged_nan_output_is_not_blamed_on_the_loss_inputs():
    for crit in (nn.NLLLoss(), nn.CrossEntropyLoss(), nn.BCEWithLogitsLoss(), nn.MSELoss()):
        inspector = LossInputInspector()
        for _ in range(5):
            inspector.observe(torch.full((8, 3), float("nan")), torch.zeros(8, dtype=torch.long)
                              if crit.__class__.__name__ in ("NLLLoss", "CrossEntropyLoss")
                              else torch.zeros(8, 3), crit)
        assert codes(inspector) == []
