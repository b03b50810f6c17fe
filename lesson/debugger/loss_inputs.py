"""What goes into the loss: catch outputs and targets that the criterion cannot use correctly.

Five silent bugs live between the model's last layer and the loss function. None of them
raises an error; the loss still falls a little, so only the numbers fed to the criterion give
them away:

* DOUBLE_SOFTMAX: probabilities fed to a loss that applies (log-)softmax or sigmoid itself.
  Rows of a softmax output lie in [0, 1] and sum to 1 over the class dimension.
* SOFTMAX_WRONG_DIM: softmax (or log_softmax) taken over the batch dimension: the *columns*
  (dim 0) sum to 1 (their logsumexp is 0) instead of the rows.
* NLL_WITHOUT_LOG_SOFTMAX: raw logits (positive values, rows whose logsumexp is not 0) fed to
  NLLLoss, which expects log-probabilities.
* LOSS_SHAPE_MISMATCH: an (N, 1) prediction against an (N,) target broadcasts to (N, N).
  Checked only for criteria KNOWN to compare prediction and target element by element
  (nn.MSELoss, L1Loss, SmoothL1Loss, HuberLoss, BCELoss, BCEWithLogitsLoss and their
  torch.nn.functional forms): for them, unequal shapes can only mean broadcasting. A
  hand-written (UNKNOWN) criterion gets no shape check at all, because it may reshape its own
  inputs (e.g. `p.squeeze(1)` inside a custom cross-entropy), so a shape difference at its
  door is no evidence of silent broadcasting.
* OUTPUT_RANGE_MISMATCH: a ReLU/softplus output (never below 0) or a sigmoid output (inside
  [0, 1]) trained towards targets that lie outside that range.

`LossInputInspector.observe` runs inside the training step, so it only launches a few
reductions on the output's own device and folds them into running accumulators (no host
sync, no reference to the user's tensors). `findings()` reads everything in one transfer.
"""
from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from lesson.findings import Finding
from lesson.debugger.running import RunningStats, to_host

# -- criterion kinds ---------------------------------------------------------------------------
CLASS_LOGITS = "class_logits"          #: CrossEntropyLoss: expects raw logits (N, C, ...)
CLASS_LOG_PROBS = "class_log_probs"    #: NLLLoss: expects log-probabilities (N, C, ...)
BINARY_LOGITS = "binary_logits"        #: BCEWithLogitsLoss: expects raw logits
BINARY_PROBS = "binary_probs"          #: BCELoss: expects probabilities in [0, 1]
REGRESSION = "regression"              #: MSE, L1, SmoothL1, Huber: unbounded predictions
UNKNOWN = "unknown"                    #: anything else: only criterion-independent checks

_MODULE_KINDS: tuple[tuple[type, str], ...] = (
    (nn.CrossEntropyLoss, CLASS_LOGITS),
    (nn.NLLLoss, CLASS_LOG_PROBS),
    (nn.BCEWithLogitsLoss, BINARY_LOGITS),
    (nn.BCELoss, BINARY_PROBS),
    (nn.MSELoss, REGRESSION),
    (nn.L1Loss, REGRESSION),
    (nn.SmoothL1Loss, REGRESSION),
    (nn.HuberLoss, REGRESSION),
)
_FUNCTION_KINDS: dict[str, str] = {
    "cross_entropy": CLASS_LOGITS,
    "nll_loss": CLASS_LOG_PROBS,
    "binary_cross_entropy_with_logits": BINARY_LOGITS,
    "binary_cross_entropy": BINARY_PROBS,
    "mse_loss": REGRESSION,
    "l1_loss": REGRESSION,
    "smooth_l1_loss": REGRESSION,
    "huber_loss": REGRESSION,
}
_FUNCTIONS = {getattr(F, name): kind for name, kind in _FUNCTION_KINDS.items()}

#: Criteria that compare prediction and target element by element (shapes must be equal).
#: Only these get the LOSS_SHAPE_MISMATCH check; UNKNOWN criteria may reshape their inputs.
ELEMENTWISE_KINDS = frozenset({BINARY_LOGITS, BINARY_PROBS, REGRESSION})

# -- thresholds --------------------------------------------------------------------------------
MIN_SUM_TOLERANCE = 1e-3
"""Rows (or columns) 'sum to 1' when |sum - 1| is below this (widened to 4 machine epsilons
of the output's dtype for float16/bfloat16, whose softmax sums are rounded coarser)."""

NLL_LOGSUMEXP_TOLERANCE = 0.1
"""Log-probabilities have logsumexp 0 over the class dimension. NLLLoss inputs whose rows are
further from 0 than this (or that hold positive values) are not log-probabilities."""

MIN_SHARE_OF_BATCHES = 0.9
"""A pattern counts only when it holds in at least this share of the observed batches: the
bugs here are in the code, so they show in every batch, while a legitimate output may cross a
pattern once by chance (e.g. all logits inside [0, 1] right after initialisation)."""

MIN_BATCHES_BINARY = 3
"""BCEWithLogitsLoss fed sigmoid outputs is judged after this many batches only: its evidence
(every value inside [0, 1]) is weaker than rows summing to 1."""

MIN_BATCHES_RANGE = 3
"""OUTPUT_RANGE_MISMATCH is judged after this many batches, so that a legitimate output had
time to leave the range it started in."""

MIN_UNREACHABLE_SHARE = 0.1
"""OUTPUT_RANGE_MISMATCH fires when at least this share of the targets lies outside the range
the output never left (a few outliers below 0 do not make a ReLU output wrong)."""

MATRIX_PRODUCTS = frozenset({"AddmmBackward0", "MmBackward0", "BmmBackward0",
                             "BaddbmmBackward0", "LinearBackward0", "ConvolutionBackward0"})
"""Autograd nodes of a Linear or convolution layer: an output made by one (through reshapes
only, RESHAPES) is raw scores, whatever range its values fall in..."""
RESHAPES = frozenset({"ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0",
                      "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2",
                      "UnsqueezeBackward0", "TransposeBackward0", "PermuteBackward0",
                      "SelectBackward0", "SliceBackward0", "CloneBackward0",
                      "ExpandBackward0", "ToCopyBackward0"})
"""...(nodes that move or copy values without changing them). A GAN's discriminator near
equilibrium gives logits that stay inside [0, 1] batch after batch: values alone called them
sigmoid outputs (DOUBLE_SOFTMAX on BCEWithLogitsLoss)."""


def criterion_kind(criterion: Any) -> str:
    """What the criterion expects as prediction: one of the kind constants of this module.

    nn.Module losses are recognised by type; functions by identity, or by name when they come
    from torch (seen through functools.partial and functools.wraps wrappers). A hand-written
    function is UNKNOWN even when it is called `cross_entropy`: it may well expect
    probabilities.
    """
    for cls, kind in _MODULE_KINDS:
        if isinstance(criterion, cls):
            return kind
    fn = _unwrap(criterion)
    if _hashable(fn) and fn in _FUNCTIONS:
        return _FUNCTIONS[fn]
    if (inspect.isfunction(fn) or inspect.isbuiltin(fn)) \
            and str(getattr(fn, "__module__", "")).startswith("torch"):
        return _FUNCTION_KINDS.get(getattr(fn, "__name__", ""), UNKNOWN)
    return UNKNOWN


def _unwrap(fn: Any) -> Any:
    """Look through functools.partial and functools.wraps layers (a few at most)."""
    for _ in range(8):
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__
        else:
            break
    return fn


def _hashable(obj: Any) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


def criterion_name(criterion: Any) -> str:
    """A short readable name for evidence: 'CrossEntropyLoss', 'cross_entropy', ..."""
    if isinstance(criterion, nn.Module):
        return type(criterion).__name__
    fn = _unwrap(criterion)
    return getattr(fn, "__name__", type(fn).__name__)


def sum_tolerance(dtype: torch.dtype) -> float:
    """How far from 1 a sum of probabilities of this dtype may land (see MIN_SUM_TOLERANCE)."""
    return max(MIN_SUM_TOLERANCE, 4 * torch.finfo(dtype).eps)


def values_tolerance(output: torch.Tensor) -> float | torch.Tensor:
    """`sum_tolerance` of the precision the values were computed in: a float32 output whose
    values all fit bfloat16 (or float16) exactly was computed in it and upcast (autocast, then
    `.float()` before the loss), and carries its rounding. Then a 0-dim tensor on the output's
    device (no host sync)."""
    x = output.detach()
    if x.dtype != torch.float32 or x.numel() == 0:
        return sum_tolerance(x.dtype)
    tol: float | torch.Tensor = sum_tolerance(x.dtype)
    for low in (torch.float16, torch.bfloat16):      # the coarser one wins if both fit
        tol = torch.where((x.to(low).float() == x).all(), sum_tolerance(low), tol)
    return tol


_SUMS = ("rows_prob", "cols_prob", "rows_logprob", "cols_logprob", "nll_off", "in01",
         "targets", "targets_below0", "targets_above1")
_MINS = ("out_min", "target_min")
_MAXS = ("out_max", "target_max", "row_sum_error", "col_sum_error", "row_lse", "col_lse")


@dataclass
class _KindState:
    """What one kind of criterion has seen so far (counts on the host, values on device)."""

    name: str
    batches: int = 0
    row_batches: int = 0          # batches with a class dimension of >= 2 classes
    col_batches: int = 0          # batches with a batch dimension of >= 2 samples
    range_batches: int = 0        # batches with floating targets (regression range check)
    first_step: int | None = None
    shape_mismatch: dict[str, Any] | None = None
    shape_mismatch_count: int = 0
    classes: int = 0              # the class dimension's size (classification kinds)
    matrix_product_batches: int = 0   # outputs straight from a Linear/conv (raw scores)
    stats: RunningStats = field(default_factory=lambda: RunningStats(_SUMS, _MINS, _MAXS))


class LossInputInspector:
    """Watches the (output, target) pairs that reach the criterion; reports loss-input bugs.

    `observe(output, target, criterion)` is cheap and sync-free; `findings(step)` turns the
    accumulated evidence into `Finding`s (DOUBLE_SOFTMAX, SOFTMAX_WRONG_DIM,
    NLL_WITHOUT_LOG_SOFTMAX, LOSS_SHAPE_MISMATCH, OUTPUT_RANGE_MISMATCH).
    """

    def __init__(self) -> None:
        self._states: dict[str, _KindState] = {}

    def reset(self) -> None:
        """Forget everything observed so far."""
        self._states.clear()

    @property
    def batches_observed(self) -> int:
        return sum(s.batches for s in self._states.values())

    # -- on the hot path ---------------------------------------------------------------------
    @torch.no_grad()
    def chance_loss(self) -> float | None:
        """The loss of a model that guesses uniformly (ln C), for the classification criterion
        seen; None when no classification loss was seen."""
        classes = [st.classes for st in self._states.values() if st.classes >= 2]
        return math.log(classes[0]) if len(classes) == 1 else None

    def observe(self, output: Any, target: Any, criterion: Any = None, *,
                step: int | None = None) -> None:
        """Fold one criterion call into the running evidence (no host sync).

        Anything that is not a floating-point tensor output is skipped silently: the
        inspector must never break the user's training step. `step` (optional) is the
        training step, used to say when a finding was first seen.
        """
        if not isinstance(output, torch.Tensor) or not output.is_floating_point():
            return
        if output.numel() == 0 or output.dim() == 0:
            return
        kind = criterion_kind(criterion)
        state = self._states.get(kind)
        if state is None:
            state = self._states[kind] = _KindState(criterion_name(criterion))
        state.batches += 1
        if state.first_step is None:
            state.first_step = step
        target = target if isinstance(target, torch.Tensor) else None
        if target is not None:
            self._check_shapes(state, kind, output, target)
        if kind in (CLASS_LOGITS, CLASS_LOG_PROBS) and output.dim() >= 2:
            state.classes = output.shape[1]
        elif kind in (BINARY_LOGITS, BINARY_PROBS):
            state.classes = 2
        state.matrix_product_batches += made_by_matrix_product(output)

        out = output.detach().float()
        device = out.device
        tol = values_tolerance(output)
        o_min, o_max = torch.aminmax(out)
        in01 = (o_min >= 0) & (o_max <= 1)
        nonpos = o_max <= tol
        sums: dict[str, torch.Tensor] = {"in01": in01}
        maxs: dict[str, torch.Tensor] = {"out_max": o_max}

        class_dim = _class_dim(kind, out)
        if class_dim is not None and out.shape[class_dim] >= 2:
            state.row_batches += 1
            row_error = (out.sum(class_dim) - 1).abs().amax()
            row_lse = torch.logsumexp(out, class_dim).abs().amax()
            sums["rows_prob"] = in01 & (row_error <= tol)
            sums["rows_logprob"] = nonpos & (row_lse <= tol)
            # written so that NaN compares False: a diverged run is not evidence of this
            sums["nll_off"] = (o_max > tol) | (row_lse > NLL_LOGSUMEXP_TOLERANCE)
            maxs["row_sum_error"] = row_error
            maxs["row_lse"] = row_lse
        if _has_batch_dim(kind, out) and out.shape[0] >= 2:
            state.col_batches += 1
            col_error = (out.sum(0) - 1).abs().amax()
            col_lse = torch.logsumexp(out, 0).abs().amax()
            sums["cols_prob"] = in01 & (col_error <= tol)
            sums["cols_logprob"] = nonpos & (col_lse <= tol)
            maxs["col_sum_error"] = col_error
            maxs["col_lse"] = col_lse

        mins: dict[str, torch.Tensor] = {"out_min": o_min}
        if kind == REGRESSION and target is not None and target.is_floating_point() \
                and target.numel() > 0:
            state.range_batches += 1
            tgt = target.detach().float()
            t_min, t_max = torch.aminmax(tgt)
            mins["target_min"] = t_min
            maxs["target_max"] = t_max
            sums["targets"] = torch.isfinite(tgt).sum()
            sums["targets_below0"] = (tgt < 0).sum()
            sums["targets_above1"] = (tgt > 1).sum()
        state.stats.update(device, sums=sums, mins=mins, maxs=maxs)

    @staticmethod
    def _check_shapes(state: _KindState, kind: str, output: torch.Tensor,
                      target: torch.Tensor) -> None:
        """Shapes are host metadata: comparing them costs no sync."""
        if output.shape == target.shape or kind not in ELEMENTWISE_KINDS:
            return  # only known element-wise losses promise to compare shapes as given
        try:
            broadcast = torch.broadcast_shapes(output.shape, target.shape)
        except RuntimeError:
            return  # the criterion raises an error itself: not a silent bug
        state.shape_mismatch_count += 1
        if state.shape_mismatch is None:
            state.shape_mismatch = {
                "output_shape": list(output.shape), "target_shape": list(target.shape),
                "broadcast_shape": list(broadcast), "elements_compared": broadcast.numel(),
                "elements_expected": max(output.numel(), target.numel())}

    # -- when diagnosing ---------------------------------------------------------------------
    def findings(self, step: int | None = None) -> list[Finding]:
        """The loss-input bugs seen so far (an empty list when every call looked right)."""
        out: list[Finding] = []
        host = to_host({kind: state.stats.packed() for kind, state in self._states.items()})
        for kind, state in self._states.items():
            if state.batches == 0:
                continue
            values = state.stats.unpack(host[kind])
            when = state.first_step if state.first_step is not None else step
            out.extend(_judge(kind, state, values, when))
        for finding in out:
            finding.evidence = {k: _plain(v) for k, v in finding.evidence.items()}
        return out


def made_by_matrix_product(output: torch.Tensor) -> bool:
    """Did `output` come straight out of a Linear or convolution layer (through reshapes
    only)? Read from its autograd graph: host metadata, no sync; False without a graph."""
    fn = output.grad_fn
    for _ in range(8):
        if fn is None:
            return False
        name = type(fn).__name__
        if name in MATRIX_PRODUCTS:
            return True
        if name not in RESHAPES or not fn.next_functions:
            return False
        fn = fn.next_functions[0][0]
    return False


def _plain(value: Any) -> Any:
    """Evidence must be JSON-ready: a statistic never measured (inf/NaN) becomes None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _class_dim(kind: str, out: torch.Tensor) -> int | None:
    """Class dimension per torch conventions: 1 for (N, C, ...), 0 for an unbatched (C,)
    input of a classification loss, none for element-wise losses on a vector."""
    if out.dim() >= 2:
        return 1
    return 0 if kind in (CLASS_LOGITS, CLASS_LOG_PROBS) else None


def _has_batch_dim(kind: str, out: torch.Tensor) -> bool:
    if kind in (CLASS_LOGITS, CLASS_LOG_PROBS):
        return out.dim() >= 2
    return out.dim() >= 1


def _share(count: float, total: int) -> float:
    return count / total if total else 0.0


def _judge(kind: str, state: _KindState, v: dict[str, float], step: int | None,
           ) -> list[Finding]:
    """Evidence of one criterion kind -> findings."""
    found: list[Finding] = []
    crit = state.name
    common = {"criterion": crit, "batches_checked": state.batches,
              "output_min": v["out_min"], "output_max": v["out_max"]}

    cols_prob = _share(v["cols_prob"], state.col_batches)
    cols_logprob = _share(v["cols_logprob"], state.col_batches)
    rows_prob = _share(v["rows_prob"], state.row_batches)
    rows_logprob = _share(v["rows_logprob"], state.row_batches)
    wrong_dim = max(cols_prob - rows_prob, cols_logprob - rows_logprob) >= MIN_SHARE_OF_BATCHES
    if wrong_dim:
        log = cols_logprob > cols_prob
        found.append(Finding(
            "SOFTMAX_WRONG_DIM",
            f"The output fed to {crit} is a {'log_softmax' if log else 'softmax'} over the "
            f"batch dimension: its columns (dim 0) "
            f"{'have logsumexp 0' if log else 'sum to 1'} in "
            f"{max(cols_prob, cols_logprob):.0%} of the batches, its rows do not. Every "
            "sample's prediction depends on the other samples of the batch.",
            evidence=common | {
                "share_of_batches": max(cols_prob, cols_logprob),
                "max_column_sum_error": v["col_sum_error"] if not log else None,
                "max_column_logsumexp": v["col_lse"] if log else None,
                "max_row_sum_error": v["row_sum_error"] if not log else None},
            step=step))

    if kind == CLASS_LOGITS and not wrong_dim and rows_prob >= MIN_SHARE_OF_BATCHES:
        found.append(Finding(
            "DOUBLE_SOFTMAX",
            f"{crit} expects raw logits but gets probabilities: every value lies in "
            f"[{v['out_min']:.3g}, {v['out_max']:.3g}] and each row sums to 1 (largest error "
            f"{v['row_sum_error']:.2g}). Softmax is applied twice, so gradients shrink and "
            "the loss cannot go below its floor.",
            evidence=common | {"share_of_batches": rows_prob,
                               "max_row_sum_error": v["row_sum_error"]},
            step=step))

    in01 = _share(v["in01"], state.batches)
    raw_scores = _share(state.matrix_product_batches, state.batches) >= MIN_SHARE_OF_BATCHES
    if kind == BINARY_LOGITS and not wrong_dim and state.batches >= MIN_BATCHES_BINARY \
            and in01 >= MIN_SHARE_OF_BATCHES and not raw_scores:
        found.append(Finding(
            "DOUBLE_SOFTMAX",
            f"{crit} expects raw logits but every value it got lies in "
            f"[{v['out_min']:.3g}, {v['out_max']:.3g}] ({in01:.0%} of {state.batches} "
            "batches): the output already went through a sigmoid, which the loss applies "
            "again.",
            evidence=common | {"share_of_batches": in01},
            advice="Remove the sigmoid from the model's output; BCEWithLogitsLoss applies it "
                   "itself (apply torch.sigmoid only to read probabilities at inference).",
            step=step))

    nll_off = _share(v["nll_off"], state.row_batches)
    if kind == CLASS_LOG_PROBS and not wrong_dim and nll_off >= MIN_SHARE_OF_BATCHES:
        probs = rows_prob >= MIN_SHARE_OF_BATCHES
        what = ("probabilities (softmax without the log)" if probs else "raw logits")
        found.append(Finding(
            "NLL_WITHOUT_LOG_SOFTMAX",
            f"{crit} expects log-probabilities but gets {what}: values reach "
            f"{v['out_max']:.3g} (log-probabilities are <= 0) and rows' logsumexp is up to "
            f"{v['row_lse']:.3g} away from 0. The loss is unbounded below and does not "
            "measure the likelihood.",
            evidence=common | {"share_of_batches": nll_off, "max_row_logsumexp": v["row_lse"],
                               "looks_like_probabilities": probs},
            step=step))

    if state.shape_mismatch is not None:
        m = state.shape_mismatch
        effect = ("every prediction is compared with every target"
                  if m["elements_compared"] > m["elements_expected"]
                  else "one tensor is repeated against the other")
        found.append(Finding(
            "LOSS_SHAPE_MISMATCH",
            f"{crit} compares a prediction of shape {tuple(m['output_shape'])} with a target "
            f"of shape {tuple(m['target_shape'])}; they broadcast to "
            f"{tuple(m['broadcast_shape'])}, so {effect} and the loss no longer measures "
            "the error of each sample.",
            evidence={"criterion": crit, **m, "calls_seen": state.shape_mismatch_count},
            step=step))

    if kind == REGRESSION and state.range_batches >= MIN_BATCHES_RANGE and v["targets"] > 0:
        found.extend(_judge_range(state, v, step))
    return found


def _judge_range(state: _KindState, v: dict[str, float], step: int | None) -> list[Finding]:
    lo, hi = v["out_min"], v["out_max"]
    if lo >= 0 and hi <= 1:
        bound, unreachable = "[0, 1] (a sigmoid-like output)", v["targets_below0"] + \
            v["targets_above1"]
    elif lo >= 0:
        bound, unreachable = "[0, inf) (a ReLU/softplus/exp-like output)", v["targets_below0"]
    else:
        return []
    share = unreachable / v["targets"]
    if share < MIN_UNREACHABLE_SHARE:
        return []
    return [Finding(
        "OUTPUT_RANGE_MISMATCH",
        f"The model's output never left {bound} over {state.range_batches} batches, but "
        f"{share:.0%} of the targets lie outside it (targets span [{v['target_min']:.3g}, "
        f"{v['target_max']:.3g}]): the model cannot reach them however long it trains.",
        evidence={"criterion": state.name, "output_min": lo, "output_max": hi,
                  "target_min": v["target_min"], "target_max": v["target_max"],
                  "unreachable_share": share, "targets_seen": int(v["targets"]),
                  "batches_checked": state.range_batches},
        step=step)]


__all__ = ["LossInputInspector", "criterion_kind", "criterion_name", "sum_tolerance",
           "CLASS_LOGITS", "CLASS_LOG_PROBS", "BINARY_LOGITS", "BINARY_PROBS", "REGRESSION",
           "UNKNOWN"]
