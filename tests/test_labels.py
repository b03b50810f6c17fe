"""find_label_issues and check_labels_carry_signal on scikit-learn's digits."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from torch import nn

from lesson.data import labels as labels_module
from lesson.data.labels import (check_labels_carry_signal, confident_joint, find_label_issues,
                           out_of_sample_probs, per_class_thresholds)


@pytest.fixture(scope="module")
def digits():
    x, y = load_digits(return_X_y=True)
    x = ((x - x.mean(0)) / (x.std(0) + 1e-8)).astype(np.float32)
    return x, y


def flip(y: np.ndarray, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Labels with `share` of them moved to another class at random, and which ones."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(y), size=int(share * len(y)), replace=False)
    noisy = y.copy()
    noisy[idx] = (noisy[idx] + rng.integers(1, 10, len(idx))) % 10
    return noisy, idx


def logistic_regression() -> nn.Module:
    return nn.Linear(64, 10)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


@pytest.fixture(scope="module")
def noisy_run(digits):
    """10% of the digits' labels flipped, and the out-of-sample probabilities (trained once)."""
    x, y = digits
    noisy, flipped = flip(y, 0.10, seed=0)
    probs = out_of_sample_probs(logistic_regression, x, noisy, epochs=20, lr=1e-2, seed=0)
    return noisy, flipped, probs


@pytest.mark.slow
def test_flipped_labels_are_found_with_good_precision_and_recall(digits, noisy_run):
    x, y = digits
    noisy, flipped, probs = noisy_run
    # the symptom: 10% of the labels disagree with the truth
    assert (noisy != y).mean() == pytest.approx(0.10, abs=0.002)

    issues = find_label_issues(logistic_regression, x, noisy, epochs=20, lr=1e-2, seed=0)
    np.testing.assert_allclose(issues.pred_probs, probs)  # same seed, same folds, same models
    found, truth = set(issues), set(flipped.tolist())
    precision = len(found & truth) / len(found)
    recall = len(found & truth) / len(truth)
    print(f"\nconfident learning on digits, 10% flipped: {len(found)} flagged, "
          f"precision {precision:.3f}, recall {recall:.3f}")
    assert precision >= 0.7 and recall >= 0.7  # measured 0.83 / 0.84
    # ranked: the 30 least self-confident flags are nearly all real flips
    assert len(set(issues.indices[:30].tolist()) & truth) >= 25
    # the suggested class is the true one for most real flips
    real = np.isin(issues.indices, flipped)
    assert (issues.suggested[real] == y[issues.indices[real]]).mean() > 0.85

    (finding,) = issues.findings
    assert finding.code == "LABEL_NOISE"
    json.dumps(finding.to_dict())
    assert finding.evidence["share"] == pytest.approx(0.10, abs=0.03)
    assert issues.estimated_noise_rate == pytest.approx(0.10, abs=0.03)


@pytest.mark.slow
def test_agrees_with_cleanlab_on_the_same_probabilities(noisy_run):
    cleanlab_filter = pytest.importorskip("cleanlab.filter")
    noisy, flipped, probs = noisy_run
    ours = find_label_issues(None, np.zeros((len(noisy), 1)), noisy, pred_probs=probs)
    theirs = cleanlab_filter.find_label_issues(noisy, probs, n_jobs=1,
                                               return_indices_ranked_by="self_confidence")
    a, b = set(ours), set(theirs.tolist())
    jaccard = len(a & b) / len(a | b)
    print(f"\nagreement with cleanlab: Jaccard {jaccard:.3f} ({len(a)} vs {len(b)} flagged)")
    assert jaccard >= 0.9  # measured 0.97
    assert len(set(ours.indices[:20].tolist()) & set(theirs[:20].tolist())) >= 18


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_labels_give_no_label_noise(digits, seed):
    x, y = digits
    issues = find_label_issues(logistic_regression, x, y, epochs=20, lr=1e-2, seed=seed)
    assert issues.findings == []
    assert len(issues) < 0.02 * len(y)


def test_confident_learning_maths_on_a_hand_made_case():
    # six samples, two classes; sample 5 is labelled 0 but the model is sure it is 1
    labels = np.array([0, 0, 0, 1, 1, 0])
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [0.2, 0.8], [0.1, 0.9], [0.05, 0.95]])
    t = per_class_thresholds(labels, probs)
    np.testing.assert_allclose(t, [(0.9 + 0.8 + 0.7 + 0.05) / 4, 0.85])
    joint = confident_joint(labels, probs, t)
    assert joint.sum() == 6 and joint[0].sum() == 4 and joint[1].sum() == 2
    assert joint[0, 1] >= 1
    issues = find_label_issues(None, probs, labels, pred_probs=probs)
    assert list(issues) == [5] and issues.suggested.tolist() == [1]
    assert issues.findings[0].code == "LABEL_NOISE"  # 1 of 6 is far above 5%


def test_pred_probs_and_factory_are_validated():
    y = np.array([0, 1, 1, 0])
    with pytest.raises(ValueError, match="shape"):
        find_label_issues(None, np.zeros((4, 2)), y, pred_probs=np.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="probabilities"):
        find_label_issues(None, np.zeros((4, 2)), y, pred_probs=np.full((4, 2), 2.0))
    with pytest.raises(ValueError, match="model_factory or pred_probs"):
        find_label_issues(None, np.zeros((4, 2)), y)
    with pytest.raises(TypeError, match="callable"):
        find_label_issues(nn.Linear(2, 2), np.zeros((4, 2)), y, n_folds=2)
    with pytest.raises(TypeError, match="nn.Module"):
        find_label_issues(lambda: "model", np.zeros((4, 2)), y, n_folds=2)
    with pytest.raises(ValueError, match="negative"):
        find_label_issues(None, np.zeros((4, 2)), -y, pred_probs=np.full((4, 2), 0.5))
    with pytest.raises(ValueError, match="logits"):
        find_label_issues(lambda: nn.Linear(2, 1), np.random.rand(8, 2).astype(np.float32),
                          np.array([0, 1] * 4), n_folds=2, epochs=1)


# -- labels that carry no signal ----------------------------------------------------------------

FAST = {"epochs": 15, "lr": 1e-2}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_shuffled_labels_are_reported(digits, seed):
    x, y = digits
    shuffled = np.random.default_rng(seed).permutation(y)
    (f,) = check_labels_carry_signal(mlp, x, shuffled, seed=seed, **FAST)
    assert f.code == "LABELS_SHUFFLED"
    json.dumps(f.to_dict())
    # the symptom: the network memorised its labels but learned nothing that generalises
    assert f.evidence["train_loss"] < 0.5 * f.evidence["label_entropy"]
    assert abs(f.evidence["val_accuracy"] - 0.1) < 0.05


@pytest.mark.slow
def test_labels_off_by_one_row_are_reported(digits):
    x, y = digits
    order = np.random.default_rng(3).permutation(len(y))  # digits is stored 0, 1, ..., 9, 0, ...
    x, y = x[order], y[order]
    (f,) = check_labels_carry_signal(mlp, x, np.roll(y, 1), seed=3, **FAST)
    assert f.code == "LABELS_SHUFFLED"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_labels_are_never_reported(digits, seed):
    x, y = digits
    assert check_labels_carry_signal(mlp, x, y, seed=seed, **FAST) == []


@pytest.mark.slow
def test_a_merely_slow_model_is_not_mistaken_for_shuffled_labels(digits):
    x, y = digits
    slow = {"epochs": 15, "lr": 1e-6}
    # its held-out accuracy is at chance, as with shuffled labels...
    _, acc = labels_module._fit_and_score(mlp, *map(torch.as_tensor, (x[:1200], y[:1200],
                                                                      x[1200:], y[1200:])),
                                          batch_size=64, seed=0, **slow)
    assert acc < 0.2
    # ...but it has not fitted its training labels either, so nothing is concluded
    assert check_labels_carry_signal(mlp, x, y, seed=0, **slow) == []


def test_the_callers_random_state_is_untouched(digits):
    x, y = digits
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_labels_carry_signal(logistic_regression, x[:300], y[:300], epochs=1)
    assert torch.equal(torch.rand(3), expected)


def test_signal_check_validates_its_arguments(digits):
    x, y = digits
    with pytest.raises(ValueError, match="val_fraction"):
        check_labels_carry_signal(mlp, x, y, val_fraction=1.5)
    with pytest.raises(ValueError, match="one label per row"):
        check_labels_carry_signal(mlp, x, y[:10])


def imbalanced(seed: int, common: int = 1000, rare: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    """Two overlapping Gaussian classes at 20:1 (like broken_models' class_imbalance case)."""
    g = torch.Generator().manual_seed(seed)
    shift = torch.full((8,), 0.4)
    x = torch.cat([torch.randn(common, 8, generator=g) - shift,
                   torch.randn(rare, 8, generator=g) + shift])
    y = torch.cat([torch.zeros(common, dtype=torch.long), torch.ones(rare, dtype=torch.long)])
    return x, y


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_real_imbalanced_labels_are_not_reported(seed):
    # regression: accuracy against the 95% majority share called real 20:1 labels shuffled
    x, y = imbalanced(seed)
    assert check_labels_carry_signal(lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(),
                                                           nn.Linear(16, 2)),
                                     x, y, seed=seed, **FAST) == []


@pytest.mark.slow
def test_shuffled_imbalanced_labels_are_reported():
    x, y = imbalanced(0)
    shuffled = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(10))]
    (f,) = check_labels_carry_signal(lambda: nn.Sequential(nn.Linear(8, 128), nn.ReLU(),
                                                           nn.Linear(128, 2)),
                                     x, shuffled, seed=0, **FAST)
    assert f.code == "LABELS_SHUFFLED"
    # the symptom: memorised (loss below the prior's entropy), accuracy near the 95% majority,
    # yet the rare class is not recognised on held-out data
    assert f.evidence["train_loss"] < 0.95 * f.evidence["label_entropy"]
    assert f.evidence["val_accuracy"] > 0.9
    assert abs(f.evidence["val_balanced_accuracy"] - 0.5) < 0.05


def test_balanced_score_chance_level():
    y = np.array([0] * 95 + [1] * 5)
    always_common = labels_module.balanced_score(y, np.zeros(100, dtype=int))
    assert always_common.value == always_common.chance == 0.5 and always_common.stderr == 0
    perfect = labels_module.balanced_score(y, y)
    assert perfect.value == 1.0 and perfect.value > perfect.chance + 3 * perfect.stderr
