"""BatchInspector: data bugs visible in the batches, found when present and only then."""
from __future__ import annotations

import gc
import json
import weakref

import pytest
import torch

from host_sync import DEVICES, no_host_sync
from lesson.debugger.batches import MIN_BATCHES_FOR_ORDER, BatchInspector

SEEDS = [0, 1, 2]


def codes(inspector: BatchInspector) -> list[str]:
    found = inspector.findings(step=11)
    for f in found:
        json.dumps(f.to_dict())
    return [f.code for f in found]


def observe_stream(x: torch.Tensor, batch_size: int, inspector: BatchInspector | None = None,
                   ) -> BatchInspector:
    inspector = inspector or BatchInspector()
    for i, xb in enumerate(x.split(batch_size)):
        inspector.observe_inputs(xb, step=i)
    return inspector


def observe_targets(y: torch.Tensor, batch_size: int) -> BatchInspector:
    inspector = BatchInspector()
    for i, yb in enumerate(y.split(batch_size)):
        inspector.observe_targets(yb, step=i)
    return inspector


# -- NONFINITE_INPUT ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(32, 5), (16, 3, 8, 8), (64,)])
def test_nan_and_inf_in_the_input_are_counted_and_located(shape):
    gen = torch.Generator().manual_seed(0)
    inspector = BatchInspector()
    for i in range(6):
        x = torch.randn(shape, generator=gen)
        if i == 2:
            x.view(shape[0], -1)[3, 0] = float("nan")
            x.view(shape[0], -1)[9, -1] = float("inf")
        if i == 4:
            x.view(shape[0], -1)[0, 0] = float("-inf")
        inspector.observe_inputs(x, step=100 + i)
    assert codes(inspector) == ["NONFINITE_INPUT"]
    finding = inspector.findings()[0]
    assert finding.evidence["samples_with_nan"] == 1
    assert finding.evidence["samples_with_inf"] == 2
    assert finding.evidence["first_batch"] == 2
    assert finding.evidence["first_sample_indices"] == [3, 9]
    assert finding.step == 102


def test_nonfinite_symptom_loss_is_nan():
    x = torch.randn(16, 4)
    x[5, 1] = float("nan")
    model = torch.nn.Linear(4, 1)
    loss = torch.nn.functional.mse_loss(model(x), torch.zeros(16, 1))
    assert torch.isnan(loss)
    inspector = BatchInspector()
    inspector.observe_inputs(x)
    assert codes(inspector) == ["NONFINITE_INPUT"]
    assert inspector.findings(step=11)[0].step == 11  # first step unknown: the findings() step


def test_finite_inputs_give_no_nonfinite_finding():
    inspector = observe_stream(torch.randn(256, 8), 32)
    assert codes(inspector) == []


# -- UNNORMALIZED_INPUTS ------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("make", [
    lambda g: 1000 * torch.randn(256, 6, generator=g),                     # scaled by 1000
    lambda g: torch.randint(0, 256, (64, 3, 8, 8), generator=g).float(),   # raw pixels
    lambda g: torch.randn(256, 6, generator=g) + 50,                       # offset
    lambda g: 5 + 0.1 * torch.randn(256, 6, generator=g),                  # small ripple on 5
])
def test_unnormalized_inputs_are_found(make, seed):
    inspector = observe_stream(make(torch.Generator().manual_seed(seed)), 32)
    assert codes(inspector) == ["UNNORMALIZED_INPUTS"]
    ev = inspector.findings()[0].evidence
    assert ev["unnormalized_features"] == ev["features"]
    worst = ev["worst_features"][0]
    assert abs(worst["mean"]) > 2 or worst["std"] > 10


@pytest.mark.parametrize("seed", SEEDS)
def test_one_unscaled_feature_is_named(seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(512, 10, generator=gen)
    x[:, 7] = 30_000 + 8_000 * x[:, 7]  # an income in dollars next to standardised features
    inspector = observe_stream(x, 64)
    assert codes(inspector) == ["UNNORMALIZED_INPUTS"]
    ev = inspector.findings()[0].evidence
    assert ev["unnormalized_features"] == 1
    worst = ev["worst_features"][0]
    assert worst["feature"] == 7
    assert worst["mean"] == pytest.approx(30_000, rel=0.05)
    assert worst["std"] == pytest.approx(8_000, rel=0.1)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("make", [
    lambda g: torch.randn(256, 6, generator=g),                                   # standardised
    lambda g: 3 * torch.randn(256, 6, generator=g) - 1,                           # mild
    lambda g: torch.rand(64, 3, 8, 8, generator=g),                               # image [0, 1]
    lambda g: torch.nn.functional.one_hot(torch.randint(0, 5, (256,), generator=g), 5).float(),
    lambda g: (torch.rand(256, 4, generator=g) < 0.02).float(),                   # rare binary
    lambda g: (torch.rand(256, 4, generator=g) > 0.02).float(),                   # mostly ones
    lambda g: torch.randint(0, 6, (256, 3), generator=g).float(),                 # 0..5 codes
])
def test_reasonable_inputs_are_not_flagged(make, seed):
    inspector = observe_stream(make(torch.Generator().manual_seed(seed)), 32)
    assert codes(inspector) == []


def test_running_statistics_are_exact_and_stable():
    gen = torch.Generator().manual_seed(0)
    x = 1e4 + torch.randn(1000, 3, generator=gen)  # large mean, unit std: float32-hard
    inspector = observe_stream(x, 37)
    worst = inspector.findings()[0].evidence["worst_features"]
    for row in worst:
        col = x[:, row["feature"]].double()
        assert row["mean"] == pytest.approx(col.mean().item(), rel=1e-6)
        assert row["std"] == pytest.approx(col.std().item(), rel=0.01)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs(dtype):
    assert codes(observe_stream((255 * torch.rand(128, 4)).to(dtype), 32)) == [
        "UNNORMALIZED_INPUTS"]
    assert codes(observe_stream(torch.randn(128, 4).to(dtype), 32)) == []


def test_unnormalized_symptom_training_diverges():
    """Inputs 1000x too large: the learning rate that trains standardised data blows up."""
    torch.manual_seed(0)
    x = torch.randn(128, 4)
    y = x @ torch.tensor([[1.0], [-1.0], [0.5], [2.0]])
    final = {}
    for name, scale in (("fixed", 1.0), ("broken", 1000.0)):
        torch.manual_seed(1)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        inspector = BatchInspector()
        for _ in range(50):
            inspector.observe_inputs(x * scale)
            loss = torch.nn.functional.mse_loss(model(x * scale), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        final[name] = loss.item()
        assert codes(inspector) == (["UNNORMALIZED_INPUTS"] if name == "broken" else [])
    assert final["fixed"] < 0.01
    assert not final["broken"] < 1.0  # NaN or huge


# -- UNSHUFFLED_BATCHES -------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n_classes,batch_size", [(2, 8), (3, 16), (10, 32), (2, 2), (4, 64)])
def test_sorted_labels_are_unshuffled_batches(n_classes, batch_size, seed):
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, n_classes, (max(40 * batch_size, 640),), generator=gen)
    sorted_y = y.sort().values
    inspector = observe_targets(sorted_y, batch_size)
    assert codes(inspector) == ["UNSHUFFLED_BATCHES"]
    ev = inspector.findings()[0].evidence
    assert ev["classes_seen"] == n_classes
    assert ev["single_class_share"] > ev["expected_share_if_shuffled"] + 0.3
    shuffled = y[torch.randperm(len(y), generator=gen)]
    assert codes(observe_targets(shuffled, batch_size)) == []


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("batch_size", [2, 4, 32])
def test_shuffled_imbalanced_labels_are_fine(batch_size, seed):
    gen = torch.Generator().manual_seed(seed)
    y = (torch.rand(2000, generator=gen) < 0.05).long()  # 95 % class 0
    assert codes(observe_targets(y, batch_size)) == []


def test_float_binary_column_and_one_hot_targets():
    y = torch.cat([torch.zeros(320, 1), torch.ones(320, 1)])
    assert codes(observe_targets(y, 32)) == ["UNSHUFFLED_BATCHES"]
    assert codes(observe_targets(y[torch.randperm(640)], 32)) == []
    one_hot = torch.nn.functional.one_hot(torch.arange(3).repeat_interleave(200), 3).float()
    assert codes(observe_targets(one_hot, 20)) == ["UNSHUFFLED_BATCHES"]
    assert codes(observe_targets(one_hot[torch.randperm(600)], 20)) == []


def test_regression_targets_and_few_batches_are_not_judged():
    sorted_regression = torch.linspace(-3, 3, 640)[:, None]
    assert codes(observe_targets(sorted_regression, 32)) == []
    few = torch.arange(2).repeat_interleave(16 * (MIN_BATCHES_FOR_ORDER - 1) // 2)
    assert codes(observe_targets(few, 16)) == []
    single_class_stream = torch.zeros(640, dtype=torch.long)
    assert codes(observe_targets(single_class_stream, 32)) == []


def test_evaluation_calls_without_grad_are_ignored():
    inspector = BatchInspector()
    with torch.no_grad():
        for yb in torch.arange(4).repeat_interleave(64).split(16):
            inspector.observe_targets(yb)
    assert inspector.target_batches_observed == 0
    assert codes(inspector) == []


def test_unshuffled_symptom_model_drifts_to_the_last_class():
    """Sorted batches: one epoch ends pulled towards the class seen last, and less accurate
    than the same epoch shuffled."""
    results = {}
    for name in ("sorted", "shuffled"):
        torch.manual_seed(0)
        x = torch.randn(512, 2)
        y = (x[:, 0] + x[:, 1] > 0).long()
        order = y.argsort() if name == "sorted" else torch.randperm(512)
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        inspector = BatchInspector()
        for xb, yb in zip(x[order].split(32), y[order].split(32)):
            inspector.observe_targets(yb)
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            predicted = model(x).argmax(1)
        results[name] = ((predicted == y).float().mean().item(),
                         (predicted == 1).float().mean().item())
        assert codes(inspector) == (["UNSHUFFLED_BATCHES"] if name == "sorted" else [])
    assert results["sorted"][0] < results["shuffled"][0] - 0.05
    assert results["sorted"][1] > 0.55  # drifted towards class 1, the last one seen


# -- robustness ---------------------------------------------------------------------------------
def test_odd_inputs_are_skipped():
    inspector = BatchInspector()
    inspector.observe_inputs(torch.randint(0, 100, (8, 12)))  # token ids
    inspector.observe_inputs((torch.randn(8, 3),))
    inspector.observe_inputs(torch.randn(0, 3))
    inspector.observe_inputs(torch.tensor(3.0))
    inspector.observe_targets("labels")
    inspector.observe_targets(torch.randint(0, 3, (4, 5, 5)))  # segmentation map
    inspector.observe_targets(torch.zeros(4, dtype=torch.bool))
    assert inspector.input_batches_observed == 0 and inspector.target_batches_observed == 0
    assert inspector.findings() == []


def test_feature_count_changes_are_tracked_separately():
    inspector = BatchInspector()
    inspector.observe_inputs(torch.randn(16, 3))
    inspector.observe_inputs(torch.randn(16, 5) * 100)
    found = inspector.findings()
    assert [f.code for f in found] == ["UNNORMALIZED_INPUTS"]
    assert found[0].evidence["features"] == 5


def test_no_reference_to_batches_is_kept():
    inspector = BatchInspector()
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    refs = [weakref.ref(x), weakref.ref(y)]
    inspector.observe_inputs(x)
    inspector.observe_targets(y)
    assert inspector.input_batches_observed == 1 and inspector.target_batches_observed == 1
    del x, y
    gc.collect()
    assert all(r() is None for r in refs)


# -- end to end: NetworkDebugger(model, optimizer, criterion).diagnose() ------------------------
def train_under_debugger(x, y, *, seed: int, shuffle: bool = True, optimizer: str = "adam",
                         steps: int = 60, batch_size: int = 32):
    """Train a small classifier under the debugger; its codes and the last loss."""
    from lesson.debugger.monitor import NetworkDebugger

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, int(y.max()) + 1))
    opt = (torch.optim.Adam(model.parameters(), lr=1e-2) if optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    criterion = torch.nn.CrossEntropyLoss()
    with NetworkDebugger(model, opt, criterion) as debugger:
        for step in range(steps):
            if shuffle:
                idx = torch.randint(0, len(x), (batch_size,))
            else:
                idx = torch.arange(step * batch_size, (step + 1) * batch_size) % len(x)
            loss = criterion(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            debugger.record_loss(loss)
        return [f.code for f in debugger.diagnose()], loss.item()


def _data(seed: int, n_classes: int = 3):
    gen = torch.Generator().manual_seed(200 + seed)
    x = torch.randn(768, 8, generator=gen)
    return x, x[:, :n_classes].argmax(1)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_debugger_diagnoses_unnormalized_inputs(optimizer, seed):
    x, y = _data(seed)
    broken, _ = train_under_debugger(x * 1000 + 500, y, seed=seed, optimizer=optimizer)
    assert "UNNORMALIZED_INPUTS" in broken
    fixed, _ = train_under_debugger(x, y, seed=seed, optimizer=optimizer)
    assert fixed == []


@pytest.mark.parametrize("seed", [0, 1])
def test_debugger_diagnoses_nonfinite_input(seed):
    x, y = _data(seed)
    x_bad = x.clone()
    x_bad[::50, 2] = float("nan")  # a few corrupt rows
    broken, broken_loss = train_under_debugger(x_bad, y, seed=seed)
    assert "NONFINITE_INPUT" in broken
    assert broken_loss != broken_loss  # the symptom: the loss is NaN
    fixed, _ = train_under_debugger(x, y, seed=seed)
    assert fixed == []


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("n_classes", [2, 4])
def test_debugger_diagnoses_unshuffled_batches(n_classes, seed):
    x, y = _data(seed, n_classes)
    order = y.argsort()
    broken, _ = train_under_debugger(x[order], y[order], seed=seed, shuffle=False)
    assert "UNSHUFFLED_BATCHES" in broken
    fixed, _ = train_under_debugger(x, y, seed=seed, shuffle=False)  # stored in random order
    assert fixed == []


@pytest.mark.parametrize("device", DEVICES)
def test_observe_never_syncs_with_the_device(device):
    """On CUDA, torch's sync debug mode raises at any host sync; on the CPU the same calls run
    under a mode that raises at every host read (item, bool, tolist, data-dependent shapes)."""
    inspector = BatchInspector()
    x = torch.randn(64, 3, 8, 8, device=device) * 100
    x[3, 0, 0, 0] = float("nan")
    y = torch.zeros(64, dtype=torch.long, device=device)
    with no_host_sync(device):
        for step in range(10):
            inspector.observe_inputs(x, step=step)
            inspector.observe_targets(y + step % 2, step=step)
    assert sorted(f.code for f in inspector.findings()) == [
        "NONFINITE_INPUT", "UNNORMALIZED_INPUTS", "UNSHUFFLED_BATCHES"]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.int64])
def test_integer_label_dtypes(dtype):
    y = torch.arange(3).repeat_interleave(64).to(dtype)
    assert codes(observe_targets(y, 16)) == ["UNSHUFFLED_BATCHES"]
    assert codes(observe_targets(y[torch.randperm(192)], 16)) == []
