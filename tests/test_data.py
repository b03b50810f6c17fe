"""validate_data: each data bug is found with its evidence, clean data gives nothing."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

from lesson.data.validate import validate_data


def clean(seed: int, n: int = 600, d: int = 20, classes: int = 4):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, classes, n)
    return x, y


def codes(findings):
    return sorted(f.code for f in findings)


def by_code(findings, code):
    matches = [f for f in findings if f.code == code]
    assert len(matches) == 1, findings
    json.dumps(matches[0].to_dict())  # evidence is plain JSON
    return matches[0]


class PairDataset(Dataset):
    """A map-style Dataset of (x, y) pairs, as a user would write one."""

    def __init__(self, x, y) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return torch.as_tensor(self.x[i]).reshape(4, -1), int(self.y[i])


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_clean_data_gives_no_finding_in_any_container(seed):
    x, y = clean(seed, n=800)
    xt, yt = clean(seed + 100, n=200)
    assert validate_data(x, y, xt, yt) == []
    assert validate_data(torch.from_numpy(x), torch.from_numpy(y),
                         torch.from_numpy(xt), torch.from_numpy(yt)) == []
    assert validate_data(PairDataset(x, y), None, TensorDataset(torch.from_numpy(xt),
                                                               torch.from_numpy(yt))) == []


def test_clean_high_dimensional_data_has_no_near_duplicates():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3000, 784)).astype(np.float32)
    xt = rng.standard_normal((500, 784)).astype(np.float32)
    assert validate_data(x, rng.integers(0, 10, 3000), xt, rng.integers(0, 10, 500)) == []


def test_nonfinite_inputs_are_counted_with_first_rows():
    x, y = clean(0)
    x[5, 1] = np.nan
    x[9, 0] = np.inf
    x[9, 3] = -np.inf
    x[400, 2] = np.nan
    f = by_code(validate_data(x, y), "NONFINITE_INPUT")
    assert f.evidence["nan_count"] == 2 and f.evidence["inf_count"] == 2
    assert f.evidence["rows_affected"] == 3 and f.evidence["first_indices"] == [5, 9, 400]
    assert f.evidence["split"] == "train"
    # the other statistics skip the broken rows instead of turning NaN themselves
    assert "UNNORMALIZED_INPUTS" not in codes(validate_data(x, y))


def test_rows_of_nan_are_not_duplicates_or_conflicts_of_each_other():
    x, y = clean(16)
    xt, yt = clean(17, n=100)
    x[::40] = np.nan            # failed exports: whole rows of NaN, with different labels
    xt[::10] = np.nan
    assert codes(validate_data(x, y, xt, yt)) == ["NONFINITE_INPUT", "NONFINITE_INPUT"]
    everything_nan = np.full((5, 3), np.nan, dtype=np.float32)
    assert codes(validate_data(everything_nan, np.arange(5), everything_nan, np.arange(5))) == [
        "NONFINITE_INPUT", "NONFINITE_INPUT"]


def test_nonfinite_targets_and_test_split_are_reported_by_split():
    x, y = clean(1)
    xt, yt = clean(2, n=100)
    yt = yt.astype(np.float32)
    yt[7] = np.nan
    xt[3, 3] = np.nan
    found = [f for f in validate_data(x, y, xt, yt) if f.code == "NONFINITE_INPUT"]
    assert {(f.evidence["split"], f.evidence["tensor"]) for f in found} == {
        ("test", "inputs"), ("test", "targets")}


def test_raw_pixel_values_are_unnormalized_and_worst_features_named():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (500, 64)).astype(np.uint8)  # images before /255 and standardising
    f = by_code(validate_data(x, rng.integers(0, 10, 500)), "UNNORMALIZED_INPUTS")
    assert f.evidence["features_off"] == 64
    worst = f.evidence["worst_features"]
    assert len(worst) == 5 and all(w["mean"] > 100 and w["std"] > 50 for w in worst)


def test_one_unscaled_feature_is_named():
    x, y = clean(4)
    x[:, 7] = x[:, 7] * 1000 + 5e4  # e.g. a price in dollars next to standardised features
    f = by_code(validate_data(x, y), "UNNORMALIZED_INPUTS")
    assert f.evidence["features_off"] == 1
    assert f.evidence["worst_features"][0]["feature"] == 7
    assert f.evidence["worst_features"][0]["mean"] == pytest.approx(5e4, rel=1e-2)


def test_images_in_unit_range_pass_and_a_small_variation_on_a_large_offset_does_not():
    rng = np.random.default_rng(14)
    images = rng.random((500, 64)).astype(np.float32)    # pixels / 255: fine for a network
    y = rng.integers(0, 10, 500)
    assert validate_data(images, y) == []
    offset = rng.standard_normal((500, 8)).astype(np.float32)
    offset[:, 2] = 5.0 + 0.1 * offset[:, 2]              # 5.0 +- 0.1: the offset swamps it
    f = by_code(validate_data(offset, y), "UNNORMALIZED_INPUTS")
    assert [w["feature"] for w in f.evidence["worst_features"]] == [2]


@pytest.mark.parametrize("scale, shift", [(1.0, 0.0), (255.0, 0.0), (1.0, 30.0), (0.3, 0.5)])
def test_same_verdict_as_the_monitors_batch_check(scale, shift):
    from lesson.debugger.batches import BatchInspector

    x = (np.random.default_rng(15).standard_normal((256, 10)) * scale + shift).astype(np.float32)
    inspector = BatchInspector()
    for batch in np.split(x, 4):
        inspector.observe_inputs(torch.from_numpy(batch))
    monitor = "UNNORMALIZED_INPUTS" in codes(inspector.findings())
    assert ("UNNORMALIZED_INPUTS" in codes(validate_data(x))) == monitor


def test_class_imbalance_above_ten_to_one_with_counts():
    x, _ = clean(5, n=560)
    y = np.array([0] * 500 + [1] * 40 + [2] * 20)  # 25:1
    f = by_code(validate_data(x, y), "CLASS_IMBALANCE")
    assert f.evidence["ratio"] == pytest.approx(25.0)
    assert f.evidence["counts"] == {"0": 500, "1": 40, "2": 20}
    assert f.evidence["majority"] == 0 and f.evidence["minority"] == 2


def test_nine_to_one_is_not_imbalanced_and_regression_targets_are_skipped():
    x, _ = clean(6, n=500)
    y = np.array([0] * 450 + [1] * 50)
    assert validate_data(x, y) == []
    assert validate_data(x, np.random.default_rng(0).standard_normal(500)) == []


def test_exact_and_near_duplicates_across_splits():
    rng = np.random.default_rng(7)
    x, y = clean(7, n=2000, d=784, classes=10)
    xt, yt = clean(8, n=300, d=784, classes=10)
    xt[:20], yt[:20] = x[100:120], y[100:120]                      # copied rows
    noise = 0.001 * rng.standard_normal((15, 784)).astype(np.float32)
    xt[20:35], yt[20:35] = x[500:515] + noise, y[500:515]          # re-encoded copies
    far = 0.1 * rng.standard_normal((10, 784)).astype(np.float32)
    xt[35:45], yt[35:45] = x[900:910] + far, y[900:910]            # 10% noise: not a copy
    f = by_code(validate_data(x, y, xt, yt), "DUPLICATES_ACROSS_SPLITS")
    assert f.evidence["exact"] == 20 and f.evidence["near"] == 15
    assert f.evidence["share_of_test"] == pytest.approx(35 / 300)
    assert f.evidence["exact_examples"][0] == [100, 0]
    assert f.evidence["near_examples"][0] == [500, 20]
    assert validate_data(x, y, xt, yt, near_tol=None)[0].evidence["near"] == 0


def test_duplicates_in_low_dimensional_integer_data():
    rng = np.random.default_rng(9)
    x = rng.integers(0, 50, (400, 3)).astype(np.int16)   # 6 bytes per row: hashing pads
    xt = x[[3, 8, 13]] + 0
    f = by_code(validate_data(x, None, xt, near_tol=None), "DUPLICATES_ACROSS_SPLITS")
    assert f.evidence["exact"] == 3
    assert [j for _, j in f.evidence["exact_examples"]] == [0, 1, 2]


def test_conflicting_labels_within_and_across_splits():
    x, y = clean(10)
    xt, yt = clean(11, n=100)
    x[50], y[50], y[60] = x[60], 1, 2        # same input, labels 1 and 2, within train
    xt[5], yt[5], y[70] = x[70], 0, 3       # same input in train (3) and test (0)
    found = validate_data(x, y, xt, yt)
    f = by_code(found, "CONFLICTING_LABELS")
    assert f.evidence["groups"] == 2 and f.evidence["rows"] == 4
    seen = {(e["split"], e["index"], e["label"]) for g in f.evidence["examples"] for e in g}
    assert seen == {("train", 50, 1), ("train", 60, 2), ("train", 70, 3), ("test", 5, 0)}
    assert "DUPLICATES_ACROSS_SPLITS" in codes(found)


def test_identical_inputs_with_the_same_label_do_not_conflict():
    x, y = clean(12)
    x[50], y[50] = x[60], y[60]
    assert validate_data(x, y) == []


def test_one_hot_labels_are_read_as_classes():
    x, _ = clean(13, n=550)
    y = np.eye(3)[[0] * 500 + [1] * 30 + [2] * 20]
    assert codes(validate_data(x, y)) == ["CLASS_IMBALANCE"]


def test_bad_arguments_raise_clear_errors():
    x, y = clean(0)
    with pytest.raises(ValueError, match="600 rows but y_train has 10"):
        validate_data(x, y[:10])
    with pytest.raises(ValueError, match="features"):
        validate_data(x, y, x[:, :5], y)
    with pytest.raises(TypeError, match="torch.Tensor, a NumPy array or a torch Dataset"):
        validate_data("data.csv")
    with pytest.raises(ValueError, match="empty"):
        validate_data(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="y_train=None"):
        validate_data(TensorDataset(torch.zeros(4, 2), torch.zeros(4)), torch.zeros(4))


def test_one_rule_for_unnormalized_inputs_feature_by_feature():
    # 40 features around the rule's edges: |mean| near 2 and 10, std near 10, mean/std near 3
    from lesson.debugger.batches import BatchInspector, unnormalized_features

    rng = np.random.default_rng(16)
    means = np.array([0, 1.9, 2.5, 2.5, 5, 5, 9, 11, -11, -2.5] * 4, dtype=np.float64)
    stds = np.array([1, 0.1, 0.9, 0.7, 1.5, 2, 4, 4, 4, 0.5] * 4) * np.repeat([1, 2, 3, 0.3], 10)
    x = (rng.standard_normal((2000, 40)) * stds + means).astype(np.float32)
    inspector = BatchInspector()
    for batch in np.split(x, 8):
        inspector.observe_inputs(torch.from_numpy(batch))
    expected = int(unnormalized_features(x.astype(np.float64).mean(0), x.std(0, ddof=1)).sum())
    assert 0 < expected < 40
    monitor = by_code(inspector.findings(), "UNNORMALIZED_INPUTS").evidence
    validator = by_code(validate_data(x), "UNNORMALIZED_INPUTS").evidence
    assert monitor["unnormalized_features"] == validator["features_off"] == expected
    assert [w["feature"] for w in monitor["worst_features"]] == \
        [w["feature"] for w in validator["worst_features"]]


def _catalogue_inputs():
    from broken_models import datasets as D
    from broken_models.bad_model.class_imbalance import screening

    return {
        "digits standardised": lambda s: D.digits(s).x_train,
        "digits / 16": lambda s: D.digits(s, standardize=False).x_train / 16,
        "blobs 16x4": lambda s: D.blobs(s, features=16, classes=4, spread=1.5).x_train,
        "blobs 10x2": lambda s: D.blobs(s, features=10, classes=2).x_train,
        "xor": lambda s: D.xor(s).x_train,
        "regression": lambda s: D.regression(s).x_train,
        "sequences": lambda s: D.sequences(s, steps=20).x_train,
        "screening 20:1": lambda s: screening(s).x_train,
        "images in [0, 1]": lambda s: torch.rand(256, 3, 8, 8,
                                                 generator=torch.Generator().manual_seed(s)),
    }


@pytest.mark.parametrize("name", list(_catalogue_inputs()))
def test_healthy_catalogue_inputs_are_flagged_by_neither_check(name):
    from lesson.debugger.batches import BatchInspector

    for seed in range(3):
        x = _catalogue_inputs()[name](seed)
        assert "UNNORMALIZED_INPUTS" not in codes(validate_data(x, near_tol=None))
        inspector = BatchInspector()
        for batch in x.split(64):
            inspector.observe_inputs(batch)
        assert "UNNORMALIZED_INPUTS" not in codes(inspector.findings())
