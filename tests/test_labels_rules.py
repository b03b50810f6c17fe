"""lesson.data.labels without training: confident learning's steps on hand-made
probabilities, LABELS_SHUFFLED's two conditions each at its edge (the training replaced by
chosen outcomes), and the k-fold loop on a problem a linear model learns in a second."""
from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch
from torch import nn

from lesson.data import labels as L


# -- confident learning, step by step ---------------------------------------------------------

def test_thresholds_of_a_class_with_one_sample_and_of_an_absent_class():
    labels = np.array([0, 0, 2])
    probs = np.array([[0.8, 0.1, 0.1], [0.6, 0.2, 0.2], [0.3, 0.3, 0.4]])
    # class 0: the mean of 0.8 and 0.6; class 1, labelled nowhere: 1.0; class 2: its one 0.4
    np.testing.assert_allclose(L.per_class_thresholds(labels, probs), [0.7, 1.0, 0.4])


def test_rounding_keeps_row_sums_by_largest_remainders():
    m = np.array([[2.4, 0.6, 1.0], [1.5, 1.5, 0.0]])
    out = L._round_keeping_row_sums(m)
    assert out.tolist() == [[2, 1, 1], [2, 1, 0]]     # 0.6 is the largest remainder, not 2.4


def test_confident_joint_with_more_samples_than_classes():
    labels = np.array([0, 0, 0, 1, 1, 1, 1])
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9], [0.2, 0.8],
                      [0.3, 0.7], [0.1, 0.9], [0.4, 0.6]])
    t = L.per_class_thresholds(labels, probs)
    joint = L.confident_joint(labels, probs, t)
    assert joint.shape == (2, 2) and joint.tolist() == [[2, 1], [0, 4]]


def test_pruning_spares_one_sample_of_a_class_that_all_looks_like_another():
    labels = np.array([0, 0, 0, 1, 1])
    probs = np.array([[0.2, 0.8], [0.3, 0.7], [0.4, 0.6], [0.1, 0.9], [0.1, 0.9]])
    joint = np.array([[0, 3], [0, 2]])
    mask = L.prune_by_noise_rate(labels, probs, joint)
    # the two with the largest margin p1 - p0 are flagged; the class keeps its third sample
    assert mask.tolist() == [True, True, False, False, False]


def test_pruning_reads_every_class_when_there_are_fewer_samples_than_classes():
    labels = np.array([3, 3, 0])
    probs = np.array([[0.1, 0.7, 0.1, 0.1], [0.1, 0.1, 0.1, 0.7], [0.7, 0.1, 0.1, 0.1]])
    joint = np.zeros((4, 4), dtype=int)
    joint[3, 1] = 1
    assert L.prune_by_noise_rate(labels, probs, joint).tolist() == [True, False, False]


def test_a_tie_with_the_given_label_is_not_flagged():
    labels = np.array([0, 0, 1, 1])
    probs = np.array([[0.5, 0.5], [0.9, 0.1], [0.1, 0.9], [0.2, 0.8]])
    joint = np.array([[1, 1], [0, 2]])
    assert not L.prune_by_noise_rate(labels, probs, joint).any()


def test_estimated_noise_rate_is_the_joints_off_diagonal_share():
    issues = L.LabelIssues(np.array([], dtype=int), np.array([], dtype=int), np.array([]),
                           np.zeros((20, 2)), np.ones(2), np.array([[8, 2], [0, 10]]))
    assert issues.estimated_noise_rate == pytest.approx(0.1)


def test_label_noise_evidence_names_the_first_ten():
    n = 40
    labels = np.array([0, 1] * (n // 2))
    probs = np.zeros((n, 2))
    probs[labels == 1] = [0.05, 0.95]          # class 1 is right everywhere
    probs[labels == 0] = [0.9, 0.1]
    probs[np.flatnonzero(labels == 0)[:12]] = [0.02, 0.98]  # 12 of class 0 look like 1
    issues = L.find_label_issues(None, np.zeros((n, 1)), labels, pred_probs=probs)
    (f,) = issues.findings
    assert len(issues) == 12 and len(f.evidence["top_indices"]) == 10
    assert len(f.evidence["suggested"]) == 10 and set(f.evidence["suggested"]) == {1}


def test_pred_probs_edges():
    y = np.array([0, 1, 2, 0])
    with pytest.raises(ValueError, match="pred_probs must have shape"):
        L.find_label_issues(None, np.zeros((4, 1)), y, pred_probs=np.full((4, 2), 0.5))
    with pytest.raises(ValueError, match="probabilities"):     # a row sums to 1, one is < 0
        L.find_label_issues(None, np.zeros((4, 1)), y,
                            pred_probs=np.array([[1.1, -0.1, 0.0]] + [[0.4, 0.3, 0.3]] * 3))
    exact = np.eye(3)[[0, 1, 2, 0]]                # zeros are probabilities
    assert len(L.find_label_issues(None, np.zeros((4, 1)), y, pred_probs=exact)) == 0


def test_find_label_issues_trains_as_out_of_sample_probs_does_by_default():
    """find_label_issues passes its budget on: the same defaults as the k-fold training."""
    ours = inspect.signature(L.find_label_issues).parameters
    theirs = inspect.signature(L.out_of_sample_probs).parameters
    for name in ("n_folds", "epochs", "lr", "batch_size", "seed"):
        assert ours[name].default == theirs[name].default, name


# -- inputs -----------------------------------------------------------------------------------

def test_one_feature_per_sample_is_accepted():
    x, y = L._as_tensors(np.arange(5.0), [0, 1, 0, 1, 0])
    assert x.shape == (5,) and y.dtype == torch.long


def test_a_last_batch_of_one_sample_is_skipped_for_batch_norm():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    x, y = torch.randn(65, 2), torch.randint(0, 2, (65,))
    L._train(model, x, y, epochs=1, lr=1e-2, batch_size=64,
             generator=torch.Generator().manual_seed(0))
    x2, y2 = torch.randn(66, 2), torch.randint(0, 2, (66,))        # a last batch of two trains
    L._train(model, x2, y2, epochs=1, lr=1e-2, batch_size=64,
             generator=torch.Generator().manual_seed(0))


# -- the k-fold loop, on a problem a linear model learns at once -----------------------------

def _separable(n: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    x = rng.normal(size=(n, 2)).astype(np.float32) + 3.0 * (2 * y[:, None] - 1)
    return x, y


def test_out_of_sample_probs_with_the_defaults_are_right_and_complete():
    def zeroed() -> nn.Module:          # no initial guess: what it predicts, it learnt
        model = nn.Linear(2, 2)             # exactly C outputs
        nn.init.zeros_(model.weight)
        nn.init.zeros_(model.bias)
        return model

    x, y = _separable(640)
    probs = L.out_of_sample_probs(zeroed, x, y)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-9)  # every fold's rows kept
    assert (probs[np.arange(len(y)), y] > 0.5).mean() > 0.95


def test_leave_one_out_is_allowed():
    x, y = _separable(8)
    probs = L.out_of_sample_probs(lambda: nn.Linear(2, 2), x, y, n_folds=8, epochs=2)
    assert probs.shape == (8, 2)


def test_folds_are_stratified_when_every_class_has_one_sample_per_fold(monkeypatch):
    x, y = _separable(10)                     # five of each class, five folds
    seen = []
    monkeypatch.setattr(L, "_train", lambda model, xs, ys, **kw: seen.append(
        sorted(ys.tolist())))
    L.out_of_sample_probs(lambda: nn.Linear(2, 2), x, y, n_folds=5, epochs=1)
    assert seen == [[0, 0, 0, 0, 1, 1, 1, 1]] * 5   # each fold holds out one of each


# -- LABELS_SHUFFLED's two conditions, each at its edge ---------------------------------------

PER_CLASS = 100                               # validation samples of each of the 3 classes
SE = math.sqrt(3 * (1 / 3) * (2 / 3) / PER_CLASS) / 3   # balanced accuracy's, at chance 1/3


def _signal(monkeypatch, *, loss: float, right: int):
    """check_labels_carry_signal on 999 samples of 3 balanced classes, the training replaced
    by a chosen outcome: the model's training loss, and `right` validation samples of each
    class predicted right, the others as the next class (so every class is predicted a third
    of the time: chance is 1/3 exactly); the permuted-label control gets every one wrong."""
    y = np.arange(999) % 3
    calls: list[dict] = []

    def fit_and_predict(factory, x_tr, y_tr, x_val, **budget):
        calls.append(budget | {"y_tr": y_tr.clone(), "n_val": len(x_val)})
        y_val = y[x_val[:, 0].long().numpy()]
        if len(calls) == 2:
            return 1.1, (y_val + 1) % 3
        rank = np.array([(y_val[:i] == k).sum() for i, k in enumerate(y_val)])
        return loss, np.where(rank < right, y_val, (y_val + 1) % 3)

    monkeypatch.setattr(L, "_fit_and_predict", fit_and_predict)
    x = np.arange(999, dtype=np.float32)[:, None]          # x holds each sample's index
    return L.check_labels_carry_signal(lambda: nn.Linear(1, 3), x, y), calls


def test_labels_shuffled_needs_the_training_loss_below_the_prior_entropy(monkeypatch):
    entropy = math.log(3)
    edge = (1 - L.MIN_FIT) * entropy
    found, _ = _signal(monkeypatch, loss=edge - 1e-3, right=40)
    assert [f.code for f in found] == ["LABELS_SHUFFLED"]
    assert found[0].evidence["label_entropy"] == pytest.approx(entropy)
    assert found[0].evidence["val_accuracy"] == pytest.approx(0.4)
    assert found[0].evidence["val_balanced_accuracy"] == pytest.approx(0.4)
    assert found[0].evidence["chance_balanced_accuracy"] == pytest.approx(1 / 3)
    assert _signal(monkeypatch, loss=edge + 1e-3, right=40)[0] == []


def test_labels_shuffled_needs_validation_within_signal_z_errors_of_chance(monkeypatch):
    inside = math.floor(PER_CLASS * (1 / 3 + L.SIGNAL_Z * SE))
    assert [f.code for f in _signal(monkeypatch, loss=0.1, right=inside)[0]] == \
        ["LABELS_SHUFFLED"]
    assert _signal(monkeypatch, loss=0.1, right=inside + 1)[0] == []


def test_the_split_is_stratified_and_the_control_permutes_the_same_labels(monkeypatch):
    _, (real, control) = _signal(monkeypatch, loss=0.1, right=40)
    assert real["n_val"] == 3 * PER_CLASS
    assert np.bincount(real["y_tr"].numpy()).tolist() == [233] * 3
    assert sorted(control["y_tr"].tolist()) == sorted(real["y_tr"].tolist())
    assert not torch.equal(control["y_tr"], real["y_tr"])
    budget = ("epochs", "lr", "batch_size", "seed")
    assert {k: real[k] for k in budget} == {k: control[k] for k in budget}


def _training_counts(monkeypatch, y: np.ndarray) -> list[int]:
    seen = []
    monkeypatch.setattr(L, "_fit_and_predict", lambda f, x_tr, y_tr, x_val, **b: (
        seen.append(np.bincount(y_tr.numpy()).tolist()) or (1.0, np.zeros(len(x_val), int))))
    L.check_labels_carry_signal(lambda: nn.Linear(1, 3), np.zeros((len(y), 1)), y,
                                val_fraction=0.5)
    return seen[0]


def test_a_class_of_two_samples_is_split_stratified(monkeypatch):
    y = np.array([0] * 20 + [1] * 20 + [2] * 2)
    assert _training_counts(monkeypatch, y) == [10, 10, 1]   # one of the two held out


def test_a_class_of_one_sample_is_split_at_random(monkeypatch):
    y = np.array([0] * 20 + [1] * 21 + [2])                 # stratifying would be an error
    assert sum(_training_counts(monkeypatch, y)) == 21


def test_with_its_defaults_the_check_tells_random_labels_from_real_ones():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 20)).astype(np.float32)
    def mlp() -> nn.Module:
        return nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 3))
    (f,) = L.check_labels_carry_signal(mlp, x, rng.integers(0, 3, 300))
    assert f.code == "LABELS_SHUFFLED"
    real = np.digitize(x[:, 0] + x[:, 1], [-0.5, 0.5])
    assert L.check_labels_carry_signal(mlp, x, real) == []


def test_balanced_chance_over_three_classes():
    y = np.array([0, 0, 1, 1, 2, 2])
    score = L.balanced_score(y, np.array([0, 0, 0, 1, 1, 2]))
    # q = (1/2, 1/3, 1/6): chance is their sum over three classes
    assert score.chance == pytest.approx(1 / 3)
    assert score.value == pytest.approx((1 + 0.5 + 0.5) / 3)
