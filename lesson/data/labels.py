"""Labels that lie: mislabeled samples (confident learning) and labels with no signal at all.

`find_label_issues` follows Northcutt, Jiang & Chuang, "Confident Learning: Estimating
Uncertainty in Dataset Labels" (JAIR 2021):

1. Out-of-sample probabilities: k-fold training of fresh models from the caller's factory, so
   no sample is scored by a model that saw its label (or pass `pred_probs` you already have).
2. Per-class thresholds: t_j = the mean probability of class j over the samples labelled j
   (how confident the model is, on average, in a sample that really is j).
3. The confident joint C[i, j]: samples labelled i whose probability of class j reaches t_j
   (the most probable such j when several do); calibrated so that row i sums to the number of
   samples labelled i. Off the diagonal it estimates how many i-labelled samples are really j.
4. Prune by noise rate: among the samples labelled i, the C[i, j] with the largest margin
   p_j - p_i are flagged, for every j != i; a flagged sample whose most probable class is its
   own label is kept. Flagged samples are ranked by self-confidence p_label, lowest first.

`check_labels_carry_signal` asks a cruder question: do the labels say anything about the
inputs at all (LABELS_SHUFFLED)? Its rule is in its docstring.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lesson.findings import Finding
from lesson.restore import require_module

#: LABEL_NOISE is reported when more than this share of samples is flagged. A good model on
#: clean data flags 1-3% (ambiguous or unusual samples); 5% and more points at real noise
#: (Northcutt et al. 2021 estimate 3-6% label errors in common test sets).
NOISE_SHARE = 0.05
#: LABELS_SHUFFLED needs held-out accuracy within this many standard errors of chance... 3 was
#: too tight: over 1000 digits runs with shuffled labels the score's distance from chance, in
#: standard errors, had a spread of 1.1 (not 1) and exceeded 3 once (missed); 4 missed none
SIGNAL_Z = 4.0
#: ...while the training loss fell at least this share below the label entropy.
MIN_FIT = 0.05

ModelFactory = Callable[[], nn.Module]


# -- inputs and a short, quiet training loop -----------------------------------------------------

def _as_tensors(x: Any, y: Any) -> tuple[Tensor, Tensor]:
    xt = torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x)
    yt = torch.as_tensor(np.asarray(y) if not isinstance(y, Tensor) else y)
    if xt.dim() == 0 or xt.shape[0] == 0:
        raise ValueError(f"x is empty (shape {tuple(xt.shape)})")
    if yt.dim() != 1 or yt.shape[0] != xt.shape[0]:
        raise ValueError(f"y must hold one label per row of x: x has {xt.shape[0]} rows, "
                         f"y has shape {tuple(yt.shape)}")
    if yt.is_floating_point():
        if not torch.equal(yt, yt.round()):
            raise ValueError("y must hold integer class labels 0..C-1")
    if yt.numel() and int(yt.min()) < 0:
        raise ValueError("y must hold integer class labels 0..C-1 (found a negative label)")
    return xt.float(), yt.long()


def _build(model_factory: ModelFactory) -> nn.Module:
    if isinstance(model_factory, nn.Module) or not callable(model_factory):
        raise TypeError("model_factory must be a callable that returns a fresh nn.Module (a "
                        "class or a function; each fold trains a new model), got "
                        f"{type(model_factory).__name__}")
    return require_module(model_factory(), "model_factory()")


def _fresh_model(model_factory: ModelFactory, x: Tensor, n_classes: int
                 ) -> tuple[nn.Module, torch.device]:
    """A new model from the factory, its device, and a check that it outputs (N, C) logits."""
    model = _build(model_factory)
    device = _device(model)
    _check_outputs(_logits(model, x[:2].to(device)), n_classes)
    return model, device


def _device(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def _train(model: nn.Module, x: Tensor, y: Tensor, *, epochs: int, lr: float,
           batch_size: int, generator: torch.Generator) -> None:
    """Adam on cross-entropy, reshuffled every epoch; no host sync inside the loop."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator).to(x.device)
        for start in range(0, len(x), batch_size):
            idx = order[start:start + batch_size]
            if len(idx) == 1 and len(x) > 1:
                continue  # a last batch of one sample would break batch norm
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


@torch.no_grad()
def _logits(model: nn.Module, x: Tensor, batch_size: int = 4096) -> Tensor:
    model.eval()
    return torch.cat([model(x[s:s + batch_size]) for s in range(0, len(x), batch_size)])


def _check_outputs(logits: Tensor, n_classes: int) -> None:
    if logits.dim() != 2 or logits.shape[1] < n_classes:
        raise ValueError(f"the factory's model must output (N, C) logits with C >= {n_classes} "
                         f"classes, got shape {tuple(logits.shape)}")


# -- step 1: out-of-sample probabilities ---------------------------------------------------------

def out_of_sample_probs(model_factory: ModelFactory, x: Any, y: Any, *, n_folds: int = 5,
                        epochs: int = 20, lr: float = 1e-3, batch_size: int = 64,
                        seed: int = 0) -> np.ndarray:
    """(N, C) predicted probabilities, each row from a model trained on the other folds."""
    from sklearn.model_selection import KFold, StratifiedKFold

    xt, yt = _as_tensors(x, y)
    if not 2 <= n_folds <= len(yt):
        raise ValueError(f"n_folds must be between 2 and the number of samples, got {n_folds}")
    labels = yt.numpy()
    counts = np.bincount(labels)
    stratified = counts[counts > 0].min() >= n_folds  # every class in every fold
    splitter = (StratifiedKFold if stratified else KFold)(n_splits=n_folds, shuffle=True,
                                                          random_state=seed)
    probs: np.ndarray | None = None
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        for train_idx, held_idx in splitter.split(labels, labels):
            model, device = _fresh_model(model_factory, xt, int(labels.max()) + 1)
            xd, yd = xt.to(device), yt.to(device)
            tr = torch.as_tensor(train_idx, device=device)
            _train(model, xd[tr], yd[tr], epochs=epochs, lr=lr, batch_size=batch_size,
                   generator=generator)
            logits = _logits(model, xd[torch.as_tensor(held_idx, device=device)])
            if probs is None:
                probs = np.zeros((len(labels), logits.shape[1]))
            probs[held_idx] = torch.softmax(logits.double(), dim=1).cpu().numpy()
    assert probs is not None
    return probs


# -- steps 2-4: confident learning ---------------------------------------------------------------

def per_class_thresholds(labels: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """t_j = mean probability of class j over the samples labelled j (1.0 if none are)."""
    k = probs.shape[1]
    counts = np.bincount(labels, minlength=k)
    sums = np.bincount(labels, weights=probs[np.arange(len(labels)), labels], minlength=k)
    return np.where(counts > 0, sums / np.maximum(counts, 1), 1.0)


def _round_keeping_row_sums(m: np.ndarray) -> np.ndarray:
    """Round each row to integers whose sum is the row's rounded sum (largest remainders)."""
    out = np.floor(m).astype(np.int64)
    short = np.round(m.sum(axis=1)).astype(np.int64) - out.sum(axis=1)
    for i, need in enumerate(short):
        if need > 0:
            out[i, np.argsort(-(m[i] - out[i]))[:need]] += 1
    return out


def confident_joint(labels: np.ndarray, probs: np.ndarray,
                    thresholds: np.ndarray) -> np.ndarray:
    """C[i, j]: samples labelled i that are confidently j, calibrated to the label counts."""
    k = probs.shape[1]
    confident = probs >= thresholds - 1e-6
    masked = np.where(confident, probs, -np.inf)
    guess = masked.argmax(axis=1)               # the most probable confident class
    has_guess = confident.any(axis=1)
    raw = np.zeros((k, k))
    np.add.at(raw, (labels[has_guess], guess[has_guess]), 1)
    np.fill_diagonal(raw, np.maximum(raw.diagonal(), 1))  # every class keeps a correct sample
    counts = np.bincount(labels, minlength=k)
    calibrated = raw / raw.sum(axis=1, keepdims=True) * counts[:, None]
    calibrated *= len(labels) / max(calibrated.sum(), 1e-12)
    return _round_keeping_row_sums(calibrated)


def prune_by_noise_rate(labels: np.ndarray, probs: np.ndarray, joint: np.ndarray) -> np.ndarray:
    """Boolean mask: for each (i, j != i), the joint[i, j] i-labelled samples with the largest
    margin p_j - p_i; samples whose most probable class is their label are spared."""
    mask = np.zeros(len(labels), dtype=bool)
    for i in range(probs.shape[1]):
        members = np.flatnonzero(labels == i)
        if len(members) <= 1:
            continue
        for j in range(probs.shape[1]):
            take = min(int(joint[i, j]), len(members) - 1)
            if j == i or take <= 0:
                continue
            margin = probs[members, j] - probs[members, i]
            mask[members[np.argsort(-margin, kind="stable")[:take]]] = True
    own = probs.copy()
    own[np.arange(len(labels)), labels] += 1e-9  # a tie goes to the given label
    mask &= own.argmax(axis=1) != labels
    return mask


@dataclass
class LabelIssues:
    """The result of `find_label_issues`; iterate it for the flagged indices, worst first."""

    indices: np.ndarray           # flagged samples, lowest self-confidence first
    suggested: np.ndarray         # the most probable class of each flagged sample
    self_confidence: np.ndarray   # p(given label) of each flagged sample
    pred_probs: np.ndarray        # (N, C) out-of-sample probabilities that were used
    thresholds: np.ndarray        # per-class confident thresholds t_j
    joint: np.ndarray             # calibrated confident joint (given label x likely true label)
    findings: list[Finding] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self):
        return iter(self.indices.tolist())

    @property
    def estimated_noise_rate(self) -> float:
        """Share of samples the confident joint places off its diagonal."""
        return float(1 - np.trace(self.joint) / max(self.joint.sum(), 1))


def find_label_issues(model_factory: ModelFactory | None, x: Any, y: Any, *,
                      pred_probs: Any = None, n_folds: int = 5, epochs: int = 20,
                      lr: float = 1e-3, batch_size: int = 64, seed: int = 0,
                      noise_share: float = NOISE_SHARE) -> LabelIssues:
    """Indices of the samples most likely mislabeled, by confident learning (module docstring).

    `model_factory()` must return a fresh, untrained classifier (N, C logits); it is trained
    `n_folds` times on cross-entropy with Adam. Pass `pred_probs` (N, C out-of-sample
    probabilities) to skip the training. A LABEL_NOISE finding is attached when more than
    `noise_share` of the samples are flagged.
    """
    _, yt = _as_tensors(x, y)
    labels = yt.numpy()
    if pred_probs is None:
        if model_factory is None:
            raise ValueError("pass a model_factory or pred_probs")
        probs = out_of_sample_probs(model_factory, x, y, n_folds=n_folds, epochs=epochs,
                                    lr=lr, batch_size=batch_size, seed=seed)
    else:
        probs = np.asarray(pred_probs.detach().cpu() if isinstance(pred_probs, Tensor)
                           else pred_probs, dtype=np.float64)
        if probs.ndim != 2 or probs.shape[0] != len(labels) or probs.shape[1] <= labels.max():
            raise ValueError(f"pred_probs must have shape (N={len(labels)}, C>{labels.max()}), "
                             f"got {probs.shape}")
        if (probs < 0).any() or not np.allclose(probs.sum(axis=1), 1.0, atol=1e-3):
            raise ValueError("pred_probs rows must be probabilities (non-negative, sum 1)")

    thresholds = per_class_thresholds(labels, probs)
    joint = confident_joint(labels, probs, thresholds)
    mask = prune_by_noise_rate(labels, probs, joint)
    flagged = np.flatnonzero(mask)
    self_conf = probs[flagged, labels[flagged]]
    order = np.lexsort((-(probs[flagged].max(axis=1)), self_conf))
    flagged, self_conf = flagged[order], self_conf[order]
    result = LabelIssues(flagged, probs[flagged].argmax(axis=1), self_conf, probs, thresholds,
                         joint)
    share = len(flagged) / len(labels)
    if share > noise_share:
        top = flagged[:10].tolist()
        result.findings.append(Finding(
            "LABEL_NOISE",
            f"{len(flagged)} of {len(labels)} labels ({share:.1%}) look wrong: the model, "
            f"trained without them, confidently predicts another class (first: {top[:5]})",
            evidence={"flagged": len(flagged), "share": share, "threshold": noise_share,
                      "estimated_noise_rate": result.estimated_noise_rate,
                      "top_indices": top, "given": labels[top].tolist(),
                      "suggested": result.suggested[:10].tolist()},
        ))
    return result


# -- labels that carry no signal -----------------------------------------------------------------

def _fit_and_predict(model_factory: ModelFactory, x_tr: Tensor, y_tr: Tensor, x_val: Tensor, *,
                     epochs: int, lr: float, batch_size: int, seed: int
                     ) -> tuple[float, np.ndarray]:
    """(final training loss, held-out predicted classes) of a fresh model trained on (x_tr,
    y_tr)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model, device = _fresh_model(model_factory, x_tr, int(y_tr.max()) + 1)
        x_tr, y_tr, x_val = (t.to(device) for t in (x_tr, y_tr, x_val))
        _train(model, x_tr, y_tr, epochs=epochs, lr=lr, batch_size=batch_size,
               generator=torch.Generator().manual_seed(seed))
        loss = F.cross_entropy(_logits(model, x_tr), y_tr)
        pred = _logits(model, x_val).argmax(dim=1)
    return float(loss.cpu()), pred.cpu().numpy()


def _fit_and_score(model_factory: ModelFactory, x_tr: Tensor, y_tr: Tensor, x_val: Tensor,
                   y_val: Tensor, *, epochs: int, lr: float, batch_size: int,
                   seed: int) -> tuple[float, float]:
    """(final training loss, held-out accuracy) of a fresh model trained on (x_tr, y_tr)."""
    loss, pred = _fit_and_predict(model_factory, x_tr, y_tr, x_val, epochs=epochs, lr=lr,
                                  batch_size=batch_size, seed=seed)
    return loss, float((pred == y_val.cpu().numpy()).mean())


@dataclass
class BalancedScore:
    """Balanced accuracy of predictions, and what it would be if they ignored the labels."""

    value: float       # mean over the classes present in y of the recall of each class
    chance: float      # its expected value for predictions independent of the labels
    stderr: float      # its standard deviation under that independence


def balanced_score(y: np.ndarray, pred: np.ndarray) -> BalancedScore:
    """Balanced accuracy of `pred` against `y`, with its chance level for THESE predictions.

    If the predictions ignored the labels, a sample of class k would be predicted k with
    probability q_k (the share of predictions that are k), so its recall R_k is a binomial
    share with mean q_k and variance q_k (1 - q_k) / n_k. Balanced accuracy, the mean of R_k
    over the C classes present, then has mean sum(q_k) / C and the matching variance. A model
    that always predicts the majority class scores exactly its chance level, however imbalanced
    the classes are (plain accuracy would credit it with the majority share).
    """
    classes, counts = np.unique(y, return_counts=True)
    recall = np.array([(pred[y == k] == k).mean() for k in classes])
    q = np.array([(pred == k).mean() for k in classes])
    c = len(classes)
    return BalancedScore(float(recall.mean()), float(q.sum() / c),
                         float(math.sqrt((q * (1 - q) / counts).sum()) / c))


def check_labels_carry_signal(model_factory: ModelFactory, x: Any, y: Any, *,
                              val_fraction: float = 0.3, epochs: int = 30, lr: float = 1e-3,
                              batch_size: int = 64, seed: int = 0, z: float = SIGNAL_Z,
                              min_fit: float = MIN_FIT) -> list[Finding]:
    """LABELS_SHUFFLED when the labels say nothing about the inputs. The rule:

    Split the data (stratified) into training and validation parts. Train a fresh model on
    the real labels, and another, the control, on the same training inputs with their labels
    deliberately permuted (same budget, same seed). Score both on validation with BALANCED
    accuracy (the mean per-class recall), whose chance level does not move with the class
    ratio: plain accuracy cannot tell a model that found the rare class of 20:1 data from one
    that always says "common" (both sit near the 95% majority share). Chance is the larger of
    the model's own chance level (what its predictions would score if they ignored the labels,
    see `balanced_score`) and the control's balanced accuracy. LABELS_SHUFFLED is reported
    when BOTH hold:

    1. the model fits its training labels: its final training loss is at least `min_fit`
       (5%) below the entropy of the training labels, the loss of the best input-blind guess
       (the class prior);
    2. its validation balanced accuracy is not above chance by more than `z` (3) standard
       errors of balanced accuracy under independence.

    Real labels that a network fits carry over to held-out data early in training; shuffled
    labels (balanced or not) can only be memorised (1 without 2 failing). A model that is
    merely slow fails 1 and is not reported: nothing can be concluded from a model that has
    not fitted anything. Returns [] otherwise.
    """
    from sklearn.model_selection import train_test_split

    xt, yt = _as_tensors(x, y)
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    labels = yt.numpy()
    stratify = labels if np.bincount(labels)[np.bincount(labels) > 0].min() >= 2 else None
    tr, val = train_test_split(np.arange(len(labels)), test_size=val_fraction,
                               random_state=seed, stratify=stratify)
    tr_t, val_t = torch.as_tensor(tr), torch.as_tensor(val)
    x_tr, y_tr, x_val, y_val = xt[tr_t], yt[tr_t], xt[val_t], labels[val]
    budget = {"epochs": epochs, "lr": lr, "batch_size": batch_size, "seed": seed}
    loss, pred = _fit_and_predict(model_factory, x_tr, y_tr, x_val, **budget)
    shuffled = y_tr[torch.randperm(len(y_tr), generator=torch.Generator().manual_seed(seed))]
    control_loss, control_pred = _fit_and_predict(model_factory, x_tr, shuffled, x_val,
                                                  **budget)

    freq = np.bincount(y_tr.numpy()) / len(y_tr)
    entropy = float(-(freq[freq > 0] * np.log(freq[freq > 0])).sum())
    score, control = balanced_score(y_val, pred), balanced_score(y_val, control_pred)
    chance = max(score.chance, control.value)
    fits = loss < (1 - min_fit) * entropy
    at_chance = score.value <= chance + z * score.stderr
    if not (fits and at_chance):
        return []
    accuracy = float((pred == y_val).mean())
    majority = float(np.bincount(y_val).max() / len(y_val))
    return [Finding(
        "LABELS_SHUFFLED",
        f"the model fits its training labels (loss {loss:.3f}, below the {entropy:.3f} of an "
        f"input-blind guess) yet its validation balanced accuracy, {score.value:.1%}, is at "
        f"chance ({chance:.1%}; with deliberately permuted labels it reaches "
        f"{control.value:.1%}): the labels do not follow the inputs",
        evidence={"train_loss": loss, "label_entropy": entropy,
                  "val_balanced_accuracy": score.value, "chance_balanced_accuracy": chance,
                  "standard_error": score.stderr, "val_accuracy": accuracy,
                  "majority_share": majority, "permuted_val_balanced_accuracy": control.value,
                  "permuted_train_loss": control_loss, "n_val": len(y_val)},
    )]
