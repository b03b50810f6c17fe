"""The data pipeline validator (the lesson's exercise 4): what is wrong with the data itself.

`validate_data(x_train, y_train, x_test, y_test)` looks for five problems no loss curve shows:

- NONFINITE_INPUT: NaN/Inf in the inputs (or in float targets), with counts and first rows;
- UNNORMALIZED_INPUTS: features far from zero mean and unit scale, judged by the very function
  the monitor's batch checks use (`lesson.debugger.batches.unnormalized_features`), worst features named;
- CLASS_IMBALANCE: the majority class outnumbers the minority by more than 10:1 (the lesson's
  threshold), with the counts per class;
- DUPLICATES_ACROSS_SPLITS: test rows that also sit in the training split, exactly or within a
  tolerance, with example index pairs;
- CONFLICTING_LABELS: identical inputs that carry different labels.

It scales: rows are never compared pairwise. Exact duplicates are found by hashing each row's
bytes (a vectorised multilinear hash, then a byte-for-byte check of the rows whose hashes
agree), so the cost is linear in the number of rows. Near duplicates are found in a random
projection to 8 dimensions (a pair's distance grows more than 2.5x with probability 4e-8,
Johnson-Lindenstrauss), where a KD-tree answers "which training rows lie within 2.5 times the
tolerance?" for all test rows at once; every candidate is then checked at its true distance.
Column statistics take one pass, chunk by chunk, with float64 accumulators.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from lesson.debugger.batches import MAX_ABS_MEAN, MAX_STD, MEAN_TO_STD_RATIO, unnormalized_features
from lesson.findings import Finding
from lesson.data.nonfinite import MAX_LISTED, nonfinite_input_finding

#: The lesson's threshold: above this majority/minority ratio the classes are imbalanced.
IMBALANCE_RATIO = 10.0
#: Near duplicates: root-mean-square difference per feature below this share of the data's
#: overall std (1% by default: ~100x closer than two typical distinct samples).
NEAR_TOL = 0.01
#: Near-duplicate candidates are searched in a random projection to this many dimensions,
#: within this multiple of the tolerance: a true near duplicate is missed only if the
#: projection stretches its distance 2.5x, which happens with probability 4e-8 (chi-square, 8
#: degrees of freedom).
PROJECTION_DIM = 8
PROJECTION_REACH = 2.5
#: Rows per chunk when scanning: keeps temporaries small (6 MB at 784 float32 features) and
#: float32 partial sums accurate (relative error below 2048 x 6e-8).
CHUNK_ROWS = 2048
#: How many example index pairs or features a finding lists.
EXAMPLES = 5


# -- loading: tensors, arrays and datasets become (n, d) arrays ----------------------------------

def _to_numpy(value: Any, what: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple, int, float, np.generic)):
        return np.asarray(value)
    raise TypeError(f"{what} must be a torch.Tensor, a NumPy array or a torch Dataset, "
                    f"got {type(value).__name__}")


def _from_dataset(ds: Dataset, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Stack a Dataset of (x, y) pairs into two arrays (a TensorDataset without copying)."""
    if isinstance(ds, TensorDataset) and len(ds.tensors) == 2:
        return _to_numpy(ds.tensors[0], what), _to_numpy(ds.tensors[1], what)
    try:
        pairs = [ds[i] for i in range(len(ds))]  # type: ignore[arg-type]
        xs, ys = zip(*pairs)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{what} must yield (x, y) pairs: {err}") from err
    return (np.stack([_to_numpy(v, what) for v in xs]),
            np.asarray([_to_numpy(v, what) for v in ys]))


def _load(x: Any, y: Any, split: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(inputs as a C-contiguous (n, d) array, labels as (n,) or None), validated."""
    if isinstance(x, Dataset):
        if y is not None:
            raise ValueError(f"pass y_{split}=None when x_{split} is a Dataset of (x, y) pairs")
        x, y = _from_dataset(x, f"x_{split}")
    xs = _to_numpy(x, f"x_{split}")
    if xs.ndim == 0 or xs.shape[0] == 0:
        raise ValueError(f"x_{split} is empty (shape {xs.shape})")
    if not (np.issubdtype(xs.dtype, np.number) or xs.dtype == bool):
        raise TypeError(f"x_{split} must be numeric, got dtype {xs.dtype}")
    xs = np.ascontiguousarray(xs.reshape(xs.shape[0], -1))
    if y is None:
        return xs, None
    ys = _to_numpy(y, f"y_{split}")
    if ys.ndim == 0:
        raise ValueError(f"y_{split} must hold one label per row, got a scalar")
    if ys.shape[0] != xs.shape[0]:
        raise ValueError(f"x_{split} has {xs.shape[0]} rows but y_{split} has {ys.shape[0]}")
    if _per_position(ys):
        return xs, None
    if ys.ndim == 2 and ys.shape[1] > 1:
        ys = ys.argmax(axis=1)  # one-hot or probabilities -> class index
    return xs, (ys.reshape(ys.shape[0], -1)[:, 0] if ys.ndim > 1 else ys)


def _per_position(ys: np.ndarray) -> bool:
    """Targets with a label per position (a token per time step, a class per pixel), not per
    sample: integer ids beyond 0/1 in two or more axes, or labels of three or more axes. Their
    class frequencies are the language's or the image's, and no sample has one label, so the
    label checks leave them alone."""
    if ys.ndim < 2 or all(n == 1 for n in ys.shape[1:]):
        return False
    if ys.ndim > 2:
        return True
    return bool(np.issubdtype(ys.dtype, np.integer) and ys.size and ys.max() > 1)


def _class_labels(y: np.ndarray | None) -> np.ndarray | None:
    """Integer class labels, or None for regression targets (non-integral floats)."""
    if y is None or y.size == 0:
        return None
    if np.issubdtype(y.dtype, np.integer) or y.dtype == bool:
        return y.astype(np.int64)
    if np.issubdtype(y.dtype, np.floating) and np.isfinite(y).all() and (y == np.round(y)).all():
        return y.astype(np.int64)
    return None


# -- one pass over the columns: non-finite rows and float64 moments ------------------------------

def _scan(x: np.ndarray) -> dict[str, Any]:
    """Non-finite rows and counts, and per-feature mean/std over the finite rows.

    One pass, chunk by chunk. Values are shifted by the mean of the first rows (so that
    E[x^2] - E[x]^2 does not cancel), chunk sums are taken in float32 (or float64 for
    integers) and accumulated in float64. A chunk whose column sums are finite holds no
    NaN/Inf, so only the rare chunks with a non-finite sum are searched row by row."""
    n, d = x.shape
    floating = np.issubdtype(x.dtype, np.floating)
    work = np.result_type(x.dtype, np.float32) if floating else np.float64
    head = x[: min(n, 256)].astype(np.float64)
    head = head[np.isfinite(head).all(axis=1)]
    shift = (head.mean(axis=0) if len(head) else np.zeros(d)).astype(work)
    bad = np.zeros(n, dtype=bool)
    nan = inf = 0
    s1, s2, count = np.zeros(d), np.zeros(d), 0
    for start in range(0, n, CHUNK_ROWS):
        chunk = x[start:start + CHUNK_ROWS]
        c = chunk - shift
        col = c.sum(axis=0)
        if floating and not np.isfinite(col).all():
            rows_ok = np.isfinite(chunk).all(axis=1)
            bad[start:start + len(chunk)] = ~rows_ok
            nan += int(np.isnan(chunk[~rows_ok]).sum())
            inf += int(np.isinf(chunk[~rows_ok]).sum())
            c = c[rows_ok]
            col = c.sum(axis=0)
        s1 += col
        s2 += np.einsum("ij,ij->j", c, c)
        count += len(c)
    mean_c = s1 / max(count, 1)
    var = np.maximum(s2 / max(count, 1) - mean_c ** 2, 0.0)
    return {"bad_rows": bad, "nan": nan, "inf": inf, "rows": count,
            "mean": mean_c + shift, "std": np.sqrt(var)}


def _nonfinite_finding(stats: dict[str, Any], split: str, what: str = "inputs"
                       ) -> Finding | None:
    bad = stats["bad_rows"]
    if not bad.any():
        return None
    first = np.flatnonzero(bad)[:MAX_LISTED].tolist()
    return nonfinite_input_finding(what=what, nan=stats["nan"], inf=stats["inf"],
                                   rows=int(bad.sum()), total_rows=len(bad), first_rows=first,
                                   split=split)


def _unnormalized_finding(stats: dict[str, Any], split: str) -> Finding | None:
    """The monitor's BatchInspector rule, the very same function (lesson.debugger.batches)."""
    mean, std = stats["mean"], stats["std"]
    size = np.abs(mean)
    off = unnormalized_features(mean, std)
    if stats["rows"] < 2 or not off.any():
        return None
    badness = np.maximum(size / MAX_ABS_MEAN, std / MAX_STD)
    worst = [j for j in np.argsort(-badness, kind="stable") if off[j]][:EXAMPLES]
    features = [{"feature": int(j), "mean": float(mean[j]), "std": float(std[j])} for j in worst]
    return Finding(
        "UNNORMALIZED_INPUTS",
        f"{int(off.sum())} of {len(mean)} {split} features are not standardised; worst: "
        f"feature {features[0]['feature']} with mean {features[0]['mean']:.3g} and std "
        f"{features[0]['std']:.3g} (standardised features have mean 0 and std 1)",
        evidence={"split": split, "features_off": int(off.sum()), "features": len(mean),
                  "worst_features": features, "overall_mean": float(mean.mean()),
                  "overall_std": float(np.sqrt((std ** 2).mean())),
                  "thresholds": {"max_abs_mean": MAX_ABS_MEAN, "max_std": MAX_STD,
                                 "mean_to_std_ratio": MEAN_TO_STD_RATIO}},
    )


def _imbalance_finding(labels: np.ndarray, ratio_max: float) -> Finding | None:
    classes, counts = np.unique(labels, return_counts=True)
    if len(classes) < 2:
        return None
    ratio = counts.max() / counts.min()
    if ratio <= ratio_max:
        return None
    major, minor = classes[counts.argmax()], classes[counts.argmin()]
    return Finding(
        "CLASS_IMBALANCE",
        f"class {major} has {counts.max()} training samples and class {minor} only "
        f"{counts.min()}: a {ratio:.1f}:1 ratio (threshold {ratio_max:g}:1)",
        evidence={"ratio": float(ratio), "majority": int(major), "minority": int(minor),
                  "counts": {str(c): int(k) for c, k in zip(classes[:50], counts[:50])}},
    )


# -- exact duplicates: hash the bytes of each row -----------------------------------------------

def _row_hashes(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """A 64-bit hash per row: sum of the row's 8-byte words times random odd multipliers.

    Rows with equal bytes get equal hashes; different rows collide with negligible
    probability, and every match is checked byte for byte anyway."""
    n = x.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    raw = x.view(np.uint8).reshape(n, -1)
    width = -(-raw.shape[1] // 8) * 8
    rng = np.random.default_rng(seed)
    multipliers = rng.integers(0, 2 ** 63, size=width // 8, dtype=np.uint64) * 2 + 1
    out = np.empty(n, dtype=np.uint64)
    for start in range(0, n, CHUNK_ROWS):
        chunk = raw[start:start + CHUNK_ROWS]
        if width != raw.shape[1]:
            chunk = np.pad(chunk, ((0, 0), (0, width - raw.shape[1])))
        words = chunk.view(np.uint64)
        out[start:start + CHUNK_ROWS] = (words * multipliers).sum(axis=1, dtype=np.uint64)
    return out


def _exact_pairs(x_train: np.ndarray, rows_train: np.ndarray, h_train: np.ndarray,
                 x_test: np.ndarray, rows_test: np.ndarray, h_test: np.ndarray
                 ) -> list[tuple[int, int]]:
    """(train index, test index) for every test row with a byte-identical training row.

    `rows_*` are the rows taking part (the finite ones) and `h_*` their hashes."""
    order = np.argsort(h_train, kind="stable")
    sorted_h = h_train[order]
    candidates = np.flatnonzero(np.isin(h_test, sorted_h))
    lo = np.searchsorted(sorted_h, h_test[candidates], side="left")
    hi = np.searchsorted(sorted_h, h_test[candidates], side="right")
    pairs = []
    for c, a, b in zip(candidates, lo, hi):
        j = int(rows_test[c])
        row = x_test[j].tobytes()
        match = next((int(rows_train[order[k]]) for k in range(a, b)
                      if x_train[rows_train[order[k]]].tobytes() == row), None)
        if match is not None:
            pairs.append((match, j))
    return pairs


# -- near duplicates: random projection + KD-tree, then the true distance ------------------------

def _project(x: np.ndarray, rows: np.ndarray, seed: int) -> np.ndarray:
    """The chosen rows in PROJECTION_DIM random directions (or as they are, if that is fewer)."""
    d = x.shape[1]
    if d <= PROJECTION_DIM:
        return x[rows].astype(np.float64)
    rng = np.random.default_rng(seed)
    proj = (rng.standard_normal((d, PROJECTION_DIM)) / np.sqrt(PROJECTION_DIM)).astype(np.float32)
    return (x.astype(np.float32, copy=False) @ proj)[rows]  # project all: no copy of x[rows]


def _near_pairs(x_train: np.ndarray, train_rows: np.ndarray, x_test: np.ndarray,
                test_rows: np.ndarray, radius: float, seed: int = 0
                ) -> list[tuple[int, int, float]]:
    """(train index, test index, RMS difference) of the closest training row within `radius`
    (an L2 distance) of each test row that has one, searching only the given rows."""
    from scipy.spatial import cKDTree  # scipy comes with scikit-learn

    reach = PROJECTION_REACH if x_train.shape[1] > PROJECTION_DIM else 1.0
    tree = cKDTree(_project(x_train, train_rows, seed))
    neighbours = tree.query_ball_point(_project(x_test, test_rows, seed), r=reach * radius,
                                       return_sorted=False)
    if not any(len(n) for n in neighbours):
        return []
    test_idx = test_rows[np.repeat(np.arange(len(test_rows)), [len(n) for n in neighbours])]
    train_idx = train_rows[np.concatenate(neighbours).astype(np.int64)]
    dist = np.empty(len(test_idx))
    for start in range(0, len(test_idx), CHUNK_ROWS):
        s = slice(start, start + CHUNK_ROWS)
        diff = x_train[train_idx[s]].astype(np.float64) - x_test[test_idx[s]]
        dist[s] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    keep = dist <= radius
    best: dict[int, tuple[int, float]] = {}
    for i, j, r in zip(train_idx[keep], test_idx[keep], dist[keep]):
        if int(j) not in best or r < best[int(j)][1]:
            best[int(j)] = (int(i), float(r))
    d = x_train.shape[1]
    return [(i, j, r / np.sqrt(d)) for j, (i, r) in sorted(best.items())]


def _duplicates_finding(x_train: np.ndarray, x_test: np.ndarray,
                        hashed: dict[str, tuple[np.ndarray, np.ndarray]], scale: float,
                        near_tol: float | None) -> Finding | None:
    rows_train, rows_test = hashed["train"][0], hashed["test"][0]
    exact = _exact_pairs(x_train, *hashed["train"], x_test, *hashed["test"])
    near: list[tuple[int, int, float]] = []
    if near_tol and scale > 0 and len(rows_train):
        rest = np.setdiff1d(rows_test, [j for _, j in exact])
        if len(rest):
            radius = near_tol * scale * np.sqrt(x_train.shape[1])
            near = _near_pairs(x_train, rows_train, x_test, rest, radius)
    if not exact and not near:
        return None
    affected = len(exact) + len(near)
    return Finding(
        "DUPLICATES_ACROSS_SPLITS",
        f"{affected} of {len(x_test)} test samples ({affected / len(x_test):.1%}) also appear "
        f"in the training split: {len(exact)} exact copies and {len(near)} near copies "
        f"(RMS difference below {near_tol or 0:g} x the data's std); examples "
        f"(train, test): {[p[:2] for p in (exact + near)[:3]]}",
        evidence={"exact": len(exact), "near": len(near), "test_rows_affected": affected,
                  "share_of_test": affected / len(x_test),
                  "exact_examples": [list(p) for p in exact[:EXAMPLES]],
                  "near_examples": [[i, j] for i, j, _ in near[:EXAMPLES]],
                  "near_tol": near_tol},
    )


# -- conflicting labels: identical rows, different labels ----------------------------------------

def _conflicts_finding(xs: list[np.ndarray], hashed: list[tuple[np.ndarray, np.ndarray]],
                       labels: list[np.ndarray], splits: list[str]) -> Finding | None:
    """Group the finite rows of all splits by hash; a group whose labels differ is checked
    byte for byte."""
    split_of = np.concatenate([np.full(len(rows), k) for k, (rows, _) in enumerate(hashed)])
    row_of = np.concatenate([rows for rows, _ in hashed])
    h = np.concatenate([hashes for _, hashes in hashed])
    y = np.concatenate([lab[rows] for lab, (rows, _) in zip(labels, hashed)])
    if len(h) < 2:
        return None

    def locate(m: int) -> tuple[int, int]:  # position in h -> (split number, row in split)
        return int(split_of[m]), int(row_of[m])

    order = np.argsort(h, kind="stable")
    h_sorted, y_sorted = h[order], y[order]
    starts = np.flatnonzero(np.r_[True, h_sorted[1:] != h_sorted[:-1]])
    sizes = np.diff(np.r_[starts, len(h)])
    lo = np.minimum.reduceat(y_sorted, starts)
    hi = np.maximum.reduceat(y_sorted, starts)
    suspect = (sizes > 1) & (lo != hi)
    groups: list[list[int]] = []
    for start, size in zip(starts[suspect], sizes[suspect]):
        by_bytes: dict[bytes, list[int]] = {}
        for m in order[start:start + size]:  # split hash collisions by the actual bytes
            s, i = locate(m)
            by_bytes.setdefault(xs[s][i].tobytes(), []).append(int(m))
        groups += [g for g in by_bytes.values() if len({int(y[m]) for m in g}) > 1]
    if not groups:
        return None
    examples = [[{"split": splits[locate(m)[0]], "index": locate(m)[1], "label": int(y[m])}
                 for m in g[:4]] for g in groups[:EXAMPLES]]
    rows = sum(len(g) for g in groups)
    return Finding(
        "CONFLICTING_LABELS",
        f"{len(groups)} distinct inputs ({rows} samples) appear with different labels; e.g. "
        + ", ".join(f"{e['split']}[{e['index']}]={e['label']}" for e in examples[0]),
        evidence={"groups": len(groups), "rows": rows, "examples": examples},
    )


# -- the validator ------------------------------------------------------------------------------

def validate_data(x_train: Any, y_train: Any = None, x_test: Any = None, y_test: Any = None,
                  *, imbalance_ratio: float = IMBALANCE_RATIO,
                  near_tol: float | None = NEAR_TOL) -> list[Finding]:
    """Check a dataset (and its test split) for the data bugs that no loss curve shows.

    Inputs may be torch tensors, NumPy arrays, or torch Datasets of (x, y) pairs (then pass
    y=None); inputs are flattened to one row per sample. Returns findings sorted by nothing in
    particular, [] for clean data: NONFINITE_INPUT, UNNORMALIZED_INPUTS (per split),
    CLASS_IMBALANCE (training labels, majority/minority > `imbalance_ratio`),
    DUPLICATES_ACROSS_SPLITS (exact, and within `near_tol` x the data's std in RMS difference
    per feature; `near_tol=None` turns near duplicates off) and CONFLICTING_LABELS.
    """
    xtr, ytr = _load(x_train, y_train, "train")
    splits = [("train", xtr, ytr)]
    if x_test is not None:
        xte, yte = _load(x_test, y_test, "test")
        if xte.shape[1] != xtr.shape[1]:
            raise ValueError(f"train rows have {xtr.shape[1]} features, test rows "
                             f"{xte.shape[1]}")
        splits.append(("test", xte, yte))
    elif y_test is not None:
        raise ValueError("y_test was given without x_test")

    findings: list[Finding] = []
    stats = {name: _scan(x) for name, x, _ in splits}
    for name, _, y in splits:
        for f in (_nonfinite_finding(stats[name], name),
                  _unnormalized_finding(stats[name], name)):
            if f:
                findings.append(f)
        if y is not None and np.issubdtype(y.dtype, np.floating):
            f = _nonfinite_finding(_scan(y.reshape(-1, 1)), name, what="targets")
            if f:
                findings.append(f)

    labels_train = _class_labels(ytr)
    if labels_train is not None:
        f = _imbalance_finding(labels_train, imbalance_ratio)
        if f:
            findings.append(f)

    hashed = {}  # split -> (its finite rows, their hashes): a NaN row matches nothing
    for name, x, _ in splits:
        rows = np.flatnonzero(~stats[name]["bad_rows"])
        hashed[name] = (rows, _row_hashes(x)[rows])
    if x_test is not None:
        scale = float(np.sqrt((stats["train"]["std"] ** 2).mean()))
        f = _duplicates_finding(xtr, xte, hashed, scale, near_tol)
        if f:
            findings.append(f)

    labelled = [(name, x, _class_labels(y)) for name, x, y in splits]
    labelled = [(name, x, y) for name, x, y in labelled if y is not None]
    if labelled:
        f = _conflicts_finding([x for _, x, _ in labelled], [hashed[n] for n, _, _ in labelled],
                               [y for _, _, y in labelled], [n for n, _, _ in labelled])
        if f:
            findings.append(f)
    return findings
