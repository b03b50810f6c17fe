"""validate_data at the edges mutation testing found unguarded: input shapes, exact statistics,
near duplicates in few dimensions or in large numbers, and the smallest conflict."""
from __future__ import annotations

import numpy as np
import pytest

from lesson.data.validate import validate_data


def codes(found) -> dict:
    return {f.code: f for f in found}


def test_one_dimensional_inputs_are_one_feature_per_row_and_column_labels_are_classes():
    rng = np.random.default_rng(0)
    assert validate_data(rng.standard_normal(200)) == []
    y = np.array([0] * 190 + [1] * 10).reshape(-1, 1)          # an (n, 1) column of labels
    found = codes(validate_data(rng.standard_normal((200, 3)), y))
    assert found["CLASS_IMBALANCE"].evidence["counts"] == {"0": 190, "1": 10}


def test_the_worst_features_statistics_are_exact():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4000, 3))
    x[:, 1] = 50.0 + 3.0 * x[:, 1]
    worst = codes(validate_data(x))["UNNORMALIZED_INPUTS"].evidence["worst_features"][0]
    assert worst["feature"] == 1
    assert worst["mean"] == pytest.approx(x[:, 1].mean(), rel=1e-6)
    assert worst["std"] == pytest.approx(x[:, 1].std(), rel=1e-6)


def _moved(rows: np.ndarray, rms: float, rng) -> np.ndarray:
    """`rows`, each moved by exactly `rms` (root-mean-square per feature) in a random direction."""
    step = rng.standard_normal(rows.shape)
    step *= rms * np.sqrt(rows.shape[1]) / np.linalg.norm(step, axis=1, keepdims=True)
    return rows + step


def test_near_duplicates_in_eight_dimensions_are_all_found():
    """Eight features: compared as they are, not through a random projection, so a copy just
    inside the tolerance is never missed."""
    rng = np.random.default_rng(2)
    train = rng.standard_normal((500, 8))
    test = np.vstack([_moved(train[:40], 0.008, rng), rng.standard_normal((60, 8))])
    found = codes(validate_data(train, None, test, None))
    assert found["DUPLICATES_ACROSS_SPLITS"].evidence["near"] == 40


def test_thousands_of_candidates_are_each_measured_at_their_true_distance():
    rng = np.random.default_rng(3)
    train = rng.standard_normal((2500, 16))
    near = codes(validate_data(train, None, _moved(train, 0.005, rng), None))
    assert near["DUPLICATES_ACROSS_SPLITS"].evidence["near"] == 2500
    assert near["DUPLICATES_ACROSS_SPLITS"].evidence["near_examples"][:2] == [[0, 0], [1, 1]]
    beyond = _moved(train, 0.015, rng)             # candidates in the projection, not copies
    assert "DUPLICATES_ACROSS_SPLITS" not in codes(validate_data(train, None, beyond, None))


def test_a_near_copy_is_paired_with_its_closest_training_row():
    rng = np.random.default_rng(4)
    train = rng.standard_normal((300, 4))
    train[1] = train[0] + 0.004           # two training rows near the same test row
    test = np.vstack([train[0] + 0.001, rng.standard_normal((20, 4))])
    found = codes(validate_data(train, None, test, None, near_tol=0.01))
    assert found["DUPLICATES_ACROSS_SPLITS"].evidence["near_examples"] == [[0, 0]]


def test_two_identical_rows_with_different_labels_conflict():
    x = np.array([[0.5, -0.5], [0.5, -0.5]])
    found = codes(validate_data(x, np.array([0, 1])))
    assert found["CONFLICTING_LABELS"].evidence["groups"] == 1


def test_targets_per_position_are_not_class_labels():
    """Token ids per time step (a language model's targets) have the language's frequencies,
    not a sampling choice: no CLASS_IMBALANCE, and no label is read from them; one-hot rows
    and (n, 1) labels are still labels."""
    import torch
    from lesson import validate_data

    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 8, generator=g)
    zipf = torch.multinomial(1 / torch.arange(1.0, 41.0), 200 * 16, replacement=True,
                             generator=g).view(200, 16)
    assert validate_data(x, zipf) == []
    assert validate_data(x, zipf.view(200, 4, 4)) == []
    skewed = torch.zeros(200, dtype=torch.long)
    skewed[:5] = 1
    for labels in (skewed, skewed.view(200, 1), torch.nn.functional.one_hot(skewed, 2)):
        assert [f.code for f in validate_data(x, labels)] == ["CLASS_IMBALANCE"]
