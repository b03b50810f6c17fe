"""Sequence models, watched: tokens, targets, padding, attention and the passes of a step.

The bugs of transformers and language models hide in relations between tensors that the
per-layer statistics never compare: targets and inputs, tokens and masks, the position a
summary is read at, the token counts of micro-batches. `SequenceWatch` is fed by the debugger
(`lesson.debugger.monitor`) on statistics steps and finds them by general mechanisms:

* **next-token runs** are recognised from the data: the targets equal one of the model's
  token inputs shifted by one along an axis (that axis is time). At the end of the first such
  step the causality probe runs once (`lesson.debugger.dependence.causal_leak`): CAUSAL_LEAK.
* **targets equal to the inputs** (not shifted), or to the inputs two positions on (shifted
  twice: by the data and again by a model that shifts its labels itself), when no input is
  the targets shifted by one (a seq2seq copy task has the targets equal to its source but
  shifted to its decoder input): TARGETS_NOT_SHIFTED.
* **padding** (pad id from `lesson.debugger.padding`): targets at padded positions that the
  loss does not ignore (PADDING_IN_LOSS); a model output read at one position that is padding
  for some rows, `out[:, -1]` on right-padded rows (PADDED_POSITION_READ); a padding mask given
  to the model that marks the tokens instead of the padding (PADDING_MASK_INVERTED, also seen
  in attention); evaluation or generation passes fed padding without its mask that training
  never showed unmasked (GENERATION_ON_PADDING).
* **attention**, through the function mode (`lesson.debugger.attention`).
* **batch and time swapped**: when the batch axis of the data is known (the next-token axis,
  the padding axis, or targets with one entry per sample), a model with recurrent or
  attention layers gets the batch-independence probe along that axis once: BATCH_MIXING.
* **gradient accumulation** over micro-batches with different token counts, whose per-pass
  mean losses reach backward with one common scale instead of weights by token count:
  ACCUMULATION_UNWEIGHTED_MEAN (for models fed token ids: a classifier's last, smaller
  micro-batch is the common practice the catalogue's fixed scripts follow, not this bug).
* **tied weights copied**: parameters that start as equal copies and drift apart
  (`lesson.debugger.copies`): UNTIED_WEIGHTS.

Everything per step runs on the tensors' device and is read in one transfer by `findings()`.
The exceptions, each once or a bounded number of times: the pad-id search and the next-token
decision read a few small tensors on the first statistics steps; the probes run once at the
end of the first step; up to MAX_EVAL_PASSES evaluation passes are checked for padding.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F

from lesson.debugger import dependence
from lesson.debugger.attention import (AttentionInspector, mha_arguments, mha_weights,
                                       sdpa_scores)
from lesson.debugger.copies import drifted, equal_copies
from lesson.debugger.padding import (ends_with, filler, pad_from_mask, pad_positions,
                                     padding_of_mask, side_of, token_tensors)
from lesson.debugger.running import RunningStats, to_host
from lesson.findings import Finding

# -- thresholds --------------------------------------------------------------------------------
RELATION_SHARE = 0.95
"""Targets "equal" an input (shifted or not) when at least this share of the targets the loss
counts do: a few may differ (a row's last target taken from the next chunk, a document
boundary), a real relation holds almost everywhere, and a chance one (1/V) almost nowhere."""

MIN_RELATION_TARGETS = 16
"""...judged over at least this many counted targets."""

PADDING_IN_LOSS_SHARE = 0.01
"""PADDING_IN_LOSS: at least this share of the targets the loss averages sit at padded
positions (one in a hundred moves a mean loss by about that much; real padding is a tenth to
a half of a batch)..."""

MIN_PADDED_TARGETS = 4
"""...and at least this many of them."""

PADDED_READ_SHARE = 0.05
"""PADDED_POSITION_READ: at least this share of the rows read at one position are padding
there (out[:, -1] on right-padded rows: every row shorter than the longest)..."""

MIN_PADDED_READS = 2
"""...and at least this many rows (one odd row is no pattern)."""

TOKEN_SPREAD = 0.1
"""ACCUMULATION_UNWEIGHTED_MEAN: the passes of a step count targets that differ by at least
this share (max / min - 1); below it a mean of means is the mean over tokens to 10%..."""

SCALE_TOLERANCE = 1e-3
"""...and each pass's loss reached backward scaled by one common factor (the same ratio
backward tensor / mean loss, within this relative tolerance), not by its token count..."""

MIN_ACCUMULATION_STEPS = 2
"""...in at least this many steps (and in more steps than were weighted correctly)."""

TRAIN_UNMASKED_PAD_SHARE = 1e-3
"""GENERATION_ON_PADDING: in training, at most this share of the input tokens were unmasked
padding with a real token after it (never, in practice: padding was masked, came only after
the text, or there was none), so no prediction was ever conditioned on padding."""

MAX_EVAL_PASSES = 16
"""Evaluation or generation passes (no gradients) checked for padding: each check copies the
batch's token ids to the host once."""

MAX_HOST_TOKENS = 1 << 20
"""The pad-id search copies a token batch to the host only up to this many ids..."""

MAX_PAD_SEARCHES = 24
"""...and on at most this many token batches (the warm-up's statistics steps and a few more):
a run whose first batches hold no padding has none to find."""

MAX_TOKEN_ID = 1 << 20
"""Token ids counted (to know which ids training showed the model) only up to this id."""

#: modules whose batch and time axes can be swapped by a missing batch_first
SEQUENCE_MODULES: tuple[type[nn.Module], ...] = (
    nn.RNNBase, nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)

SOFTMAX_FUNCTIONS = frozenset({F.softmax, torch.softmax, torch.Tensor.softmax})
READ_FUNCTIONS = frozenset({torch.Tensor.__getitem__, torch.select, torch.Tensor.select})
LOSS_FUNCTIONS = frozenset({F.cross_entropy, F.nll_loss})
#: token ids looked up inside the model (nn.Embedding calls F.embedding): the batch as the
#: attention sees it, after the model prepended a summary token or cut it
EMBEDDING_FUNCTIONS = frozenset({F.embedding})
#: what the debugger's function mode hands to `on_call`
WATCHED_CALLS = frozenset({F.scaled_dot_product_attention, F.multi_head_attention_forward}
                          | SOFTMAX_FUNCTIONS | READ_FUNCTIONS | LOSS_FUNCTIONS
                          | EMBEDDING_FUNCTIONS)


@dataclass
class _Read:
    """Reads of one position of a padded batch's outputs at one place."""

    position: int
    first_step: int
    #: rows read, rows padded at the position, rows read from outputs cut to the longest row
    stats: RunningStats = field(default_factory=lambda: RunningStats(("rows", "padded", "cut")))


@dataclass
class _Padded:
    """The padding of one token batch of this step, batch-first: (B, T) True at padding."""

    place: int | str
    tokens: torch.Tensor
    time_axis: int
    pads: torch.Tensor             # in the tokens' layout
    batch_first: torch.Tensor      # (B, T)


class SequenceWatch:
    """The sequence-model checks of one debugger (see the module doc)."""

    def __init__(self, model: nn.Module, on_error: Callable[[str, Exception], None]) -> None:
        self._model = weakref.ref(model)
        self._on_error = on_error
        self.attention = AttentionInspector()
        self.pad_id: int | None = None
        self.pad_source: str | None = None
        self.pad_side = "both"                       # where rows are padded: right/left/both
        self.time_axis: int | None = None            # of token batches, once known
        self._tokens: list[tuple[int | str, torch.Tensor]] = []   # this step's, full steps
        #: token batches looked up inside the model this step, before a pad id was known
        self._embedded: list[tuple[int | str, torch.Tensor]] = []
        self._pad_searches = 0
        #: padding read with the batch axis as time, waiting for a second batch to agree
        self._pad_candidate: tuple[int, str] | None = None
        self._padded: list[_Padded] = []
        self._lengths: set[int] = set()
        self._call: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self._pending: dict[int | str, torch.Tensor] = {}
        self._relations: dict[int | str, RunningStats] = {}
        self._pad_loss: dict[int | str, RunningStats] = {}
        self._first_loss_step: int | None = None
        self._reads: dict[str, _Read] = {}
        self._losses: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._backwards: list[torch.Tensor] = []
        self._accumulated: list[torch.Tensor] = []
        self._train_pads = RunningStats(("tokens", "unmasked"))
        self._train_ids: torch.Tensor | None = None
        self._eval_passes = 0
        #: (id, axis) that filled the row tails of an evaluation pass while no pad id was known
        #: from training: a generation loop appends after it, and its tails are then generated
        self._eval_pad: tuple[int, int] | None = None
        #: the last evaluation pass's unmasked padding at the row ends, kept for the next pass:
        #: one that continues from a state (an RNN's, a cache) generates after that padding
        self._tail_padded: dict[str, Any] | None = None
        self._generation: list[dict[str, Any]] = []
        self._inverted_masks: list[dict[str, Any]] = []
        self._class_targets: int | None = None
        self._target_counts: torch.Tensor | None = None   # per class, full steps
        self._float_input: tuple[int | str, torch.Tensor] | None = None
        self.copies: list[tuple[str, str, nn.Parameter, nn.Parameter, bool]] | None = None
        self.probe_findings: list[Finding] = []
        self.probes_done = False
        #: the model was given token ids (a loss's targets then count tokens)
        self.token_inputs = False
        self.sequence_modules = any(isinstance(m, SEQUENCE_MODULES) for m in model.modules())
        layers = [m for m in model.modules()
                  if isinstance(m, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer))]
        #: post-LN transformer layers (True), pre-LN (False), or none to tell (None)
        self.post_ln: bool | None = (not all(m.norm_first for m in layers)) if layers else None

    @property
    def transformer_like(self) -> bool:
        """Attention was seen, or the model holds attention layers."""
        return self.attention.seen or any(
            isinstance(m, (nn.MultiheadAttention, nn.TransformerEncoderLayer,
                           nn.TransformerDecoderLayer))
            for m in (self._model().modules() if self._model() is not None else ()))

    # -- training passes ---------------------------------------------------------------------
    def on_train_forward(self, args: tuple[Any, ...], kwargs: dict[str, Any], step: int,
                         full: bool, params: list[tuple[str, nn.Parameter]]) -> None:
        """The root's forward of a training pass on a statistics step."""
        model = self._model()
        if self.copies is None and model is not None:
            self.copies = equal_copies(model, params)
        if not self.token_inputs:
            self.token_inputs = bool(token_tensors(args, kwargs))
        if not full:
            return
        self._tokens = token_tensors(args, kwargs)
        self._padded = []
        self._lengths = {x.shape[a] for _, x in self._tokens for a in (0, 1)}
        first = next((t for t in list(args) + list(kwargs.values())
                      if isinstance(t, torch.Tensor)), None)
        if isinstance(first, torch.Tensor) and first.is_floating_point() and first.dim() == 3:
            place = next(i for i, a in enumerate(list(args) + list(kwargs.values()))
                         if a is first)
            keys = list(range(len(args))) + list(kwargs)
            self._float_input = (keys[place], first)
            self._lengths |= {first.shape[0], first.shape[1]}
        if not self.probes_done:
            self._call = (args, kwargs)
        for place, x in self._tokens:
            if self.pad_id is None:
                self._find_pad(x, kwargs, step)
            if self.pad_id is None:
                self._count_ids(x)
                continue
            padded = self._add_padded(place, x)
            ignored = self._masked_positions(kwargs, x.shape)
            seen = _before_real(x == self.pad_id, padded.time_axis)   # either side of the text
            if ignored is not None:
                seen = seen & ~ignored
            self._train_pads.update(x.device, sums={"tokens": x.numel(), "unmasked": seen.sum()})

    def _add_padded(self, place: int | str, x: torch.Tensor) -> _Padded:
        """Where token batch `x` (given at `place`) holds the pad id, kept for this step."""
        axis = self.time_axis if self.time_axis is not None else 1
        pads = pad_positions(x, self.pad_id, axis, self.pad_side)
        padded = _Padded(place, x, axis, pads, pads if axis == 1 else pads.t())
        self._padded.append(padded)
        return padded

    def _on_embedding(self, args: tuple[Any, ...], kwargs: dict[str, Any], where: str,
                      step: int) -> None:
        """Token ids looked up inside the model (F.embedding): the batch the attention and the
        reads are aligned with when the model changed it (a summary token prepended, say).
        An embedding's padding_idx names a pad id too."""
        x = args[0] if args else kwargs.get("input")
        if not isinstance(x, torch.Tensor) or not token_tensors((x,), {}) \
                or any(t is x for _, t in self._tokens) \
                or any(p.tokens is x for p in self._padded):
            return
        self._lengths |= {x.shape[0], x.shape[1]}
        if self.pad_id is None:
            index = args[2] if len(args) > 2 else kwargs.get("padding_idx")
            self._find_pad(x, {}, step, padding_idx=index)
        place = f"{where}: input"
        if self.pad_id is None:
            self._embedded.append((place, x))
            return
        self._add_padded(place, x)

    def _masked_positions(self, kwargs: dict[str, Any], shape: torch.Size
                          ) -> torch.Tensor | None:
        """Where the padding masks given to the model (by name) hide positions."""
        hidden = None
        for name, value in kwargs.items():
            padding = padding_of_mask(name, value, shape)
            if padding is not None:
                hidden = padding if hidden is None else hidden | padding
        return hidden

    def _find_pad(self, x: torch.Tensor, masks: dict[str, Any], step: int, *,
                  padding_idx: int | None = None) -> None:
        """The pad id: from the padding masks given with `x` (by keyword), from an embedding's
        padding_idx found at row ends, or from the token filling row tails (heads)."""
        if x.numel() > MAX_HOST_TOKENS or self._pad_searches >= MAX_PAD_SEARCHES:
            return
        self._pad_searches += 1
        tokens = x.detach().cpu()
        for name, value in masks.items():
            padding = padding_of_mask(name, value, x.shape)
            if padding is not None and self._pad_from_mask(tokens, padding.detach().cpu(),
                                                           name, step):
                return
        for axis in (1, 0):
            found = filler(tokens, axis)
            if found is None and _is_int(padding_idx) and padding_idx >= 0:
                found = ends_with(tokens, padding_idx, axis)
            elif found is not None and axis == 0 and found != self._pad_candidate:
                # read with axis 0 as time, the "rows" are positions and their runs consecutive
                # samples: two copies of one sample at the head of a batch, starting with a
                # token no other sample holds, read as left padding. Padding recurs in every
                # batch; such a coincidence does not: adopted when a second batch agrees
                self._pad_candidate = found
                return
            if found is not None:
                self.pad_id, self.time_axis, self.pad_side = found[0], axis, found[1]
                ends = "tails" if found[1] == "right" else "heads"
                self.pad_source = f"the token filling row {ends}"
                if found[0] == padding_idx:
                    self.pad_source += " (the embedding's padding_idx)"
                return

    def _pad_from_mask(self, tokens: torch.Tensor, padding: torch.Tensor, name: str,
                       step: int) -> bool:
        """The pad id from a padding mask over host `tokens` (True at what it calls padding):
        the one id at every position it hides, or, the mask being the wrong way round, at
        every position it leaves visible (kept as evidence of PADDING_MASK_INVERTED)."""
        pad = pad_from_mask(tokens, padding)
        if pad is not None:
            self.pad_id, self.pad_source = pad, f"the padding mask {name!r}"
            self.pad_side = side_of(padding)
            return True
        flipped = pad_from_mask(tokens, ~padding)
        if flipped is not None:     # the mask's padding holds tokens, its tokens one id
            self._inverted_masks.append({"mask": name, "step": step, "pad_id": flipped})
            self.pad_id, self.pad_source = flipped, f"the tokens {name!r} leaves visible"
            self.pad_side = side_of(~padding)
            return True
        return False

    def _pad_from_attention_mask(self, bound: dict[str, Any], step: int) -> None:
        """No pad id yet: a key padding mask given to attention inside the model
        (nn.MultiheadAttention, the nn.Transformer layers) against the token batches of this
        step that have its shape."""
        mask = bound.get("key_padding_mask")
        if not isinstance(mask, torch.Tensor) or mask.dim() != 2 \
                or self._pad_searches >= MAX_PAD_SEARCHES:
            return
        padding = padding_of_mask("key_padding_mask", mask, mask.shape)
        candidates = [x for _, x in self._tokens + self._embedded if x.shape == mask.shape]
        if padding is None or not candidates or candidates[0].numel() > MAX_HOST_TOKENS:
            return
        self._pad_searches += 1
        if self._pad_from_mask(candidates[0].detach().cpu(), padding.detach().cpu(),
                               "key_padding_mask", step):
            self.pad_source += " given to the attention"
            for place, x in self._tokens + self._embedded:
                self._add_padded(place, x)

    def _count_ids(self, x: torch.Tensor) -> None:
        """Which ids training showed the model (for GENERATION_ON_PADDING without a pad id)."""
        ids = x.detach().reshape(-1)
        ids = ids[(ids >= 0) & (ids < MAX_TOKEN_ID)].long()
        if ids.numel() == 0:
            return
        counts = torch.bincount(ids)
        old = self._train_ids
        if old is None:
            self._train_ids = counts
            return
        size = max(old.numel(), counts.numel())
        self._train_ids = F.pad(old.to(counts.device), (0, size - old.numel())) + \
            F.pad(counts, (0, size - counts.numel()))

    # -- calls seen by the function mode -----------------------------------------------------
    def on_call(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                out: Any, where: str, step: int, full: bool) -> None:
        """A watched torch function (WATCHED_CALLS) ran inside the model or its loss."""
        if func in LOSS_FUNCTIONS:
            self._on_loss(args, kwargs, out, step, full)
            return
        if not full:
            return
        where = where or type(self._model()).__name__      # the root's own forward
        if func in READ_FUNCTIONS:
            self._on_read(func, args, where, step)
        elif func is F.scaled_dot_product_attention:
            scores, scale = sdpa_scores(args, kwargs)
            self._attend(f"{where}/scaled_dot_product_attention", "sdpa", scores, step,
                         scale=scale)
        elif func in EMBEDDING_FUNCTIONS:
            self._on_embedding(args, kwargs, where, step)
        elif func is F.multi_head_attention_forward:
            if self.pad_id is None:
                self._pad_from_attention_mask(mha_arguments(args, kwargs), step)
            weights = mha_weights(args, kwargs)
            if weights is not None:
                self._attend(where, "multi_head_attention", weights, step, probs=True)
        elif func in SOFTMAX_FUNCTIONS:
            self._on_softmax(args, kwargs, where, step)

    def on_softmax_module(self, name: str, module: nn.Module, output: Any, step: int) -> None:
        """An nn.Softmax module's output (full statistics steps): attention if it looks so."""
        if isinstance(output, torch.Tensor) and module.dim in (-1, output.dim() - 1) \
                and self._looks_like_attention(output):
            self._attend(name, "softmax", output, step, probs=True)

    def _looks_like_attention(self, t: torch.Tensor) -> bool:
        """(..., Tq, Tk) with Tk a sequence length of this step (or square scores)."""
        return t.dim() >= 3 and t.is_floating_point() and t.shape[-1] >= 2 and (
            t.shape[-1] == t.shape[-2] or t.shape[-1] in self._lengths)

    def _on_softmax(self, args: tuple[Any, ...], kwargs: dict[str, Any], where: str,
                    step: int) -> None:
        x = args[0] if args else kwargs.get("input")
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        if not isinstance(x, torch.Tensor) or not isinstance(dim, int) \
                or dim not in (-1, x.dim() - 1) or not self._looks_like_attention(x):
            return
        self._attend(f"{where}/softmax", "softmax", x, step)

    def _attend(self, site: str, kind: str, t: torch.Tensor, step: int, *, probs: bool = False,
                scale: float | None = None) -> None:
        key_pad = query_pad = None
        if t.dim() >= 3:
            for p in self._padded:
                b, n = p.batch_first.shape
                if t.shape[-1] == n and (t.shape[0] == b or t.shape[0] % b == 0):
                    key_pad = p.batch_first
                if t.shape[-2] == n and (t.shape[0] == b or t.shape[0] % b == 0):
                    query_pad = p.batch_first
        if probs:
            self.attention.observe_probs(site, kind, t, step, key_pad, query_pad)
        else:
            self.attention.observe_scores(site, kind, t, step, key_pad, query_pad, scale)

    def _on_read(self, func: Callable[..., Any], args: tuple[Any, ...], where: str,
                 step: int) -> None:
        """x[:, p] / x[p] / torch.select(x, dim, p) of a model output aligned with a padded
        batch: which rows are padding at p?"""
        if not self._padded or len(args) < 2:
            return
        t = args[0]
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() < 2:
            return
        if func is torch.Tensor.__getitem__:
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            if len(index) >= 2 and index[0] == slice(None) and _is_int(index[1]):
                axis, position = 1, int(index[1])
            elif index and _is_int(index[0]):
                axis, position = 0, int(index[0])
            else:
                return
        elif len(args) >= 3 and _is_int(args[1]) and _is_int(args[2]):
            axis, position = int(args[1]) % t.dim(), int(args[2])
            if axis > 1:
                return
        else:
            return
        other = 1 - axis
        for p in self._padded:
            b, n = p.batch_first.shape
            m = t.shape[axis]
            if b == n or t.shape[other] != b or not 2 <= m <= n:
                continue
            padded = p.batch_first[:, position % m]
            rows: int | torch.Tensor = b
            cut: int | torch.Tensor = 0
            if m < n:
                # outputs cut to the batch's longest row (pad_packed_sequence does so): aligned
                # with the input's first m positions when the longest row is m long, which is
                # told on the device (no sync): every count is 0 otherwise
                aligned = (~p.batch_first).any(0).sum() == m
                padded, rows = padded & aligned, aligned * b
                cut = rows
            site = f"{where}: {'[:, ' if axis == 1 else '['}{position}]"
            read = self._reads.setdefault(site, _Read(position, step))
            read.stats.update(padded.device,
                              sums={"rows": rows, "padded": padded.sum(), "cut": cut})
            return

    def _on_loss(self, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, step: int,
                 full: bool) -> None:
        """F.cross_entropy / F.nll_loss (also inside nn.CrossEntropyLoss): token counts for
        accumulation; on full steps, targets against inputs and padding."""
        target = args[1] if len(args) > 1 else kwargs.get("target")
        if not isinstance(target, torch.Tensor) or target.is_floating_point() \
                or target.dim() == 0:
            return
        ignore = kwargs.get("ignore_index", -100)
        reduction = kwargs.get("reduction", "mean")
        valid = (target != ignore) & (target >= 0)
        if isinstance(out, torch.Tensor) and out.dim() == 0 and reduction == "mean":
            self._losses.append((valid.sum(), out.detach()))
        if target.dim() == 1:
            self._class_targets = target.shape[0]
        if full:
            self._count_targets(args[0] if args else kwargs.get("input"), target, valid)
        if not full or not self._tokens:
            return
        if self._first_loss_step is None:
            self._first_loss_step = step
        for place, x in self._tokens:
            rel = _relation(x, target, valid)
            if rel is None:
                continue
            stats = self._relations.setdefault(place, RunningStats(_RELATION))
            stats.update(x.device, sums=dict(zip(_RELATION, rel)))
            self._pending[place] = rel
            padded = next((p for p in self._padded if p.place == place), None)
            if padded is not None and reduction != "none":
                counted = _padding_counted(padded, target, valid)
                if counted is not None:
                    loss = self._pad_loss.setdefault(place, RunningStats(("counted", "valid")))
                    loss.update(x.device, sums={"counted": counted, "valid": valid.sum()})

    def _count_targets(self, scores: Any, target: torch.Tensor, valid: torch.Tensor) -> None:
        """How often each class is a counted target (one index_add on the device): the
        marginal entropy a model that ignores its input scores."""
        if not isinstance(scores, torch.Tensor) or not scores.is_floating_point() \
                or scores.dim() < 2:
            return
        classes = scores.shape[1]
        if self._target_counts is None:
            self._target_counts = torch.zeros(classes, device=target.device)
        if self._target_counts.numel() != classes:
            return                                   # another head's loss: one is enough
        keep = valid & (target < classes)
        self._target_counts.index_add_(0, torch.where(keep, target, 0).reshape(-1).long(),
                                       keep.reshape(-1).to(self._target_counts.dtype))

    def marginal_entropy(self) -> float | None:
        """The entropy (nats) of the counted targets' own frequencies: the loss of a model that
        predicts every class at its frequency whatever the input. None before any count.
        (One host read: called when diagnosing.)"""
        counts = self._target_counts
        if counts is None:
            return None
        total = float(counts.sum())
        if total <= 0:
            return None
        return float(torch.special.entr(counts / total).sum())

    def targets_unaligned(self) -> bool | None:
        """Are the targets one per input token yet neither the inputs shifted by one, nor
        copies of them, nor two positions on, on any axis (over at least MIN_RELATION_TARGETS
        counted targets)? None when no loss compared targets with token inputs. (One host read:
        called when diagnosing.)"""
        if not self._relations:
            return None
        rels = [_read_relation(v) for v in to_host(
            {k: s.packed() for k, s in self._relations.items()}).values()]
        compared = max(r[a][n] for r in rels for a in (0, 1) for n in ("targets",
                                                                       "twice_targets"))
        if compared < MIN_RELATION_TARGETS:
            return None
        return all(r[a][k] < RELATION_SHARE for r in rels for a in (0, 1)
                   for k in ("same", "shifted", "twice"))

    def on_backward(self, args: tuple[Any, ...]) -> None:
        """loss.backward() / torch.autograd.backward(loss) on a statistics step."""
        t = args[0] if args else None
        if isinstance(t, (tuple, list)) and len(t) == 1:
            t = t[0]
        if isinstance(t, torch.Tensor) and t.dim() == 0:
            self._backwards.append(t.detach())

    # -- evaluation and generation passes ------------------------------------------------------
    def on_eval_forward(self, args: tuple[Any, ...], kwargs: dict[str, Any], step: int) -> None:
        """A pass without gradients (evaluation, generation): fed unmasked padding?"""
        if self._eval_passes >= MAX_EVAL_PASSES:
            return
        self._eval_passes += 1
        ended, self._tail_padded = self._tail_padded, None
        if ended is not None and _continues(ended, args, kwargs):
            self._generation.append(ended["record"] | {"step": step, "continued": "state"})
        tokens = token_tensors(args, kwargs)
        for place, x in tokens:
            if x.numel() > MAX_HOST_TOKENS:
                continue
            host = x.detach().cpu()
            pad, axis = self.pad_id, self.time_axis if self.time_axis is not None else 1
            if pad is None and self._eval_pad is not None \
                    and bool((host == self._eval_pad[0]).any()):
                pad, axis = self._eval_pad     # generated tokens now follow the padding
                pads = host == pad
            elif pad is None:
                axes = (1, 0) if self.time_axis == 0 else (1,)   # see _find_pad
                found, axis = next(((f, a) for a in axes if (f := filler(host, a))),
                                   (None, 1))
                if found is None:
                    continue
                pad = found[0]
                self._eval_pad = (pad, axis)
                pads = pad_positions(host, pad, axis)
            else:               # an id training used only as padding: padding wherever it is
                pads = host == pad
            hidden = self._masked_positions(kwargs, x.shape)
            if hidden is not None:
                pads = pads & ~hidden.detach().cpu()
            before = _before_real(pads, axis)
            if before.any():
                self._generation.append(_padding_record(before, axis, step, place, pad, x))
            elif pads.any() and self.pad_id is None:
                self._tail_padded = {"pad": pad, "axis": axis, "batch": x.shape[1 - axis],
                                     "record": _padding_record(pads, axis, step, place, pad, x)}

    # -- the end of a step: accumulation bookkeeping and the one-time probes -------------------
    def end_step(self, step: int) -> None:
        """Called between steps, where no user graph is alive: keep the step's accumulation
        evidence, and on the first step that saw a loss, decide and run the probes."""
        losses, backwards = self._losses, self._backwards
        self._losses, self._backwards = [], []
        if len(losses) >= 2 and len(backwards) == len(losses) and len(self._accumulated) < 64:
            device = losses[0][1].device
            self._accumulated.append(torch.stack([
                torch.stack([n.to(device, torch.float32), c.float().to(device),
                             b.float().to(device)]) for (n, c), b in zip(losses, backwards)]))
        try:
            if not self.probes_done and self._call is not None \
                    and (self._pending or self._class_targets is not None):
                self.probes_done = True
                self._run_probes(step)
        finally:
            self._call, self._pending = None, {}
            self._tokens, self._padded, self._embedded = [], [], []

    def _run_probes(self, step: int) -> None:
        model = self._model()
        if model is None or self._call is None:
            return
        args, kwargs = self._call
        host = to_host(dict(self._pending))         # one transfer, once
        next_token = None
        for place, values in host.items():
            rel = _read_relation(values)
            for axis in (1, 0):
                if rel[axis]["shifted"] >= RELATION_SHARE:
                    next_token = (place, axis)
                    break
            if next_token:
                break
        mixing = False
        if self.sequence_modules or self.attention.seen:
            mixing = self._batch_probe(model, args, kwargs, next_token, step)
        if next_token is not None:
            place, axis = next_token
            self.time_axis = axis
            call = _call_for(args, kwargs, place, batch_dim=1 - axis, time_dim=axis)
            try:    # a model that mixes its batch runs each variant alone
                leak = dependence.causal_leak(model, call, one_by_one=mixing)
            except Exception as exc:
                self._on_error("causality probe", exc)
                leak = None
            if leak is not None:
                self.probe_findings.append(_causal_finding(leak, place, step))

    def _batch_probe(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                     next_token: tuple[int | str, int] | None, step: int) -> bool:
        """Along the data's batch axis, when the data tells it, does a sample see another?
        (True when it does.)"""
        target = None
        if next_token is not None:
            place, time_axis = next_token
            target = (place, 1 - time_axis, time_axis)
        elif self._tokens and self.time_axis is not None:
            place = self._tokens[0][0]
            target = (place, 1 - self.time_axis, self.time_axis)
        else:
            candidates = ([(p, x) for p, x in self._tokens]
                          + ([self._float_input] if self._float_input else []))
            n = self._class_targets
            for place, x in candidates:
                axes = [d for d in (0, 1) if x.shape[d] == n]
                if n is not None and len(axes) == 1:
                    target = (place, axes[0], 1 - axes[0])
                    break
        if target is None:
            return False
        place, batch_dim, time_dim = target
        call = _call_for(args, kwargs, place, batch_dim=batch_dim, time_dim=time_dim)
        if call.batch_size < 2:
            return False
        try:
            leak = dependence.batch_leak(model, call, pad_id=self.pad_id)
        except Exception as exc:
            self._on_error("batch independence probe", exc)
            return False
        if leak is None:
            return False
        where = f" (it first appears in {leak.module})" if leak.module else ""
        self.probe_findings.append(Finding(
            "BATCH_MIXING",
            f"changing sample 0 of the batch moves the outputs of samples "
            f"{leak.moved_rows[:6]}{where}: the batch and time axes are swapped (an RNN or "
            "attention without batch_first=True reading (batch, time, ...) as (time, "
            "batch, ...)) or samples are mixed by a reshape",
            layer=leak.module,
            evidence={"moved_rows": leak.moved_rows, "rows_checked": leak.rows_checked,
                      "batch_dim": batch_dim, "module": leak.module,
                      "modules_showing_it": leak.modules,
                      "relative_change": float(f"{leak.relative_change:.2g}"),
                      "argument": place},
            step=step))
        return True

    # -- findings --------------------------------------------------------------------------------
    def findings(self, step: int | None = None) -> list[Finding]:
        """Everything found (see the module doc), in one transfer from the device."""
        parts: dict[str, torch.Tensor | None] = {"train_pads": self._train_pads.packed()}
        parts |= {f"rel\0{k}": v.packed() for k, v in self._relations.items()}
        parts |= {f"pad\0{k}": v.packed() for k, v in self._pad_loss.items()}
        parts |= {f"read\0{k}": v.stats.packed() for k, v in self._reads.items()}
        parts |= {f"acc\0{i}": t for i, t in enumerate(self._accumulated)}
        host = to_host(parts)
        found: list[Finding] = list(self.probe_findings)
        found += self._targets_findings(host)
        found += self._read_findings(host)
        found += self._accumulation_findings(host)
        found += self._generation_findings(host)
        found += self._copies_findings(step)
        attention = self.attention.findings()
        if self._inverted_masks and not any(f.code == "PADDING_MASK_INVERTED" for f in attention):
            m = self._inverted_masks[0]
            attention.append(Finding(
                "PADDING_MASK_INVERTED",
                f"the mask {m['mask']!r} given to the model marks the real tokens as padding: "
                f"the positions it hides hold many ids, the ones it keeps only id "
                f"{m['pad_id']}, the padding",
                evidence=dict(m), step=m["step"]))
        return found + attention

    def _targets_findings(self, host: dict[str, Any]) -> list[Finding]:
        found = []
        rels = {k: _read_relation(host[f"rel\0{k}"]) for k in self._relations}
        shifted = any(r[a]["shifted"] >= RELATION_SHARE for r in rels.values() for a in (0, 1))
        for place, rel in rels.items():
            same = max(rel[a]["same"] for a in (0, 1))
            counted = max(rel[a]["targets"] for a in (0, 1))
            twice = max(rel[a]["twice"] for a in (0, 1))
            compared = max(rel[a]["twice_targets"] for a in (0, 1))
            if shifted:
                continue
            if same >= RELATION_SHARE and counted >= MIN_RELATION_TARGETS:
                found.append(Finding(
                    "TARGETS_NOT_SHIFTED",
                    f"{same:.0%} of the targets equal the model's input {_name(place)} at the "
                    "same position: the model is trained to copy the token it is given, not to "
                    "predict the next one",
                    evidence={"argument": place, "share_equal": round(same, 4),
                              "targets_compared": int(counted), "offset": 0},
                    step=self._first_loss_step))
            elif twice >= RELATION_SHARE and compared >= MIN_RELATION_TARGETS:
                found.append(Finding(
                    "TARGETS_NOT_SHIFTED",
                    f"{twice:.0%} of the targets equal the model's input {_name(place)} two "
                    "positions later, none the next one: the labels are shifted twice (by the "
                    "data and again by the model or the loss), so the model is trained to "
                    "predict the token after next",
                    evidence={"argument": place, "share_equal": round(twice, 4),
                              "targets_compared": int(compared), "offset": 2},
                    step=self._first_loss_step))
        # padding counted by the loss: the input the targets follow (shifted), else the only one
        places = [p for p, r in rels.items()
                  if max(r[a]["shifted"] for a in (0, 1)) >= RELATION_SHARE] or \
            (list(self._pad_loss) if len(self._pad_loss) == 1 else [])
        for place in places:
            values = host.get(f"pad\0{place}")
            if values is None:
                continue
            counted, valid = values[0], values[1]
            share = counted / valid if valid else 0.0
            if counted >= MIN_PADDED_TARGETS and share >= PADDING_IN_LOSS_SHARE:
                found.append(Finding(
                    "PADDING_IN_LOSS",
                    f"{share:.0%} of the targets the loss averages are padding (pad id "
                    f"{self.pad_id}, from {self.pad_source}) and the loss does not ignore them: "
                    "the model is trained to predict padding",
                    evidence={"pad_id": self.pad_id, "padded_share": round(share, 4),
                              "padded_targets": int(counted), "targets": int(valid),
                              "pad_id_from": self.pad_source},
                    advice=f"Pass ignore_index={self.pad_id} to the loss (or set padded targets "
                           "to -100).",
                    step=self._first_loss_step))
                break
        return found

    def _read_findings(self, host: dict[str, Any]) -> list[Finding]:
        for site, read in self._reads.items():
            rows, padded, cut = host[f"read\0{site}"][:3]
            if padded >= MIN_PADDED_READS and rows and padded / rows >= PADDED_READ_SHARE:
                what = ("the outputs stop at the batch's longest row, as pad_packed_sequence "
                        "returns them, so that position is the last step of the longest rows "
                        "only and the shorter ones are summarised by zeros" if cut else
                        "those rows are summarised by the state after their padding")
                return [Finding(
                    "PADDED_POSITION_READ",
                    f"{site} reads position {read.position} of a padded batch, which is "
                    f"padding for {padded / rows:.0%} of the rows: {what}, not by their last "
                    "token",
                    layer=site.split(":")[0] or None,
                    evidence={"site": site, "position": read.position,
                              "padded_share": round(padded / rows, 4), "rows_read": int(rows),
                              "outputs_cut_to_longest_row": bool(cut), "pad_id": self.pad_id},
                    step=read.first_step)]
        return []

    def _accumulation_findings(self, host: dict[str, Any]) -> list[Finding]:
        bad, good, example = 0, 0, None
        for i in range(len(self._accumulated)):
            values = host[f"acc\0{i}"]
            rows = [values[j:j + 3] for j in range(0, len(values), 3)]
            n = [r[0] for r in rows]
            ratio = [r[2] / r[1] if r[1] else math.nan for r in rows]
            if min(n) <= 0 or not all(math.isfinite(r) and r != 0 for r in ratio):
                continue
            if max(n) / min(n) - 1 < TOKEN_SPREAD:
                continue
            same_scale = all(abs(r / ratio[0] - 1) <= SCALE_TOLERANCE for r in ratio)
            weighted = all(abs((r / ratio[0]) / (k / n[0]) - 1) <= SCALE_TOLERANCE
                           for r, k in zip(ratio, n))
            if same_scale:
                bad += 1
                example = example or {"tokens_per_pass": [int(k) for k in n],
                                      "scale_per_pass": [float(f"{r:.3g}") for r in ratio]}
            elif weighted:
                good += 1
        if bad < MIN_ACCUMULATION_STEPS or bad <= good or not self.token_inputs:
            return []
        tokens = example["tokens_per_pass"] if example else []
        return [Finding(
            "ACCUMULATION_UNWEIGHTED_MEAN",
            f"in {bad} accumulation steps the micro-batches counted different numbers of "
            f"targets (e.g. {tokens}) and each one's mean loss went to backward with the same "
            "scale: the step averages means, so a target of a short micro-batch weighs more "
            "than one of a long one",
            evidence={"steps": bad, "steps_weighted_by_tokens": good, **(example or {})})]

    def _generation_findings(self, host: dict[str, Any]) -> list[Finding]:
        if not self._generation:
            return []
        g = self._generation[0]
        tokens, unmasked = (host["train_pads"] or [0.0, 0.0])[:2]
        if self.pad_id is not None and tokens:
            share = unmasked / tokens
            seen = (f"{share:.1%} of its training tokens were unmasked padding with a token "
                    "after it")
        elif self._train_ids is not None:
            counts = self._train_ids
            total = float(counts.sum())
            seen_pad = float(counts[g["pad_id"]]) if g["pad_id"] < counts.numel() else 0.0
            share = seen_pad / total if total else 0.0
            seen = f"id {g['pad_id']} was {share:.1%} of its training tokens"
        else:
            return []
        if share > TRAIN_UNMASKED_PAD_SHARE:
            return []
        return [Finding(
            "GENERATION_ON_PADDING",
            f"a pass without gradients (evaluation or generation) fed the model "
            f"{g['unmasked_padding']} padding positions (id {g['pad_id']}, in {g['padded_rows']} "
            f"of {g['rows']} rows) without a mask, while {seen}: what it generates depends on "
            "how much padding each prompt got",
            evidence=g | {"train_unmasked_pad_share": round(share, 5),
                          "passes": len(self._generation)},
            step=g["step"])]

    def _copies_findings(self, step: int | None) -> list[Finding]:
        if not self.copies:
            return []
        apart = drifted(self.copies)
        if not apart:
            return []
        a, b, gap = apart[0]
        return [Finding(
            "UNTIED_WEIGHTS",
            f"{a} and {b} started as equal copies and are trained apart (now {gap:.2g} of "
            f"the norm apart): weights meant to be tied are two tensors",
            layer=a.rpartition(".")[0] or None,
            evidence={"params": [a, b], "relative_difference": float(f"{gap:.3g}"),
                      "pairs": [[x, y] for x, y, _ in apart[:5]]})]


# -- helpers ------------------------------------------------------------------------------------
_RELATION = ("same1", "n1", "shifted1", "ns1", "twice1", "nt1",
             "same0", "n0", "shifted0", "ns0", "twice0", "nt0")


def _padding_record(pads: torch.Tensor, axis: int, step: int, place: int | str, pad: int,
                    x: torch.Tensor) -> dict[str, Any]:
    """GENERATION_ON_PADDING's evidence of one pass: where the unmasked padding was."""
    rows = pads.any(dim=axis)
    return {"step": step, "argument": place, "pad_id": pad, "padded_rows": int(rows.sum()),
            "rows": int(rows.numel()), "unmasked_padding": int(pads.sum()),
            "shape": list(x.shape)}


def _continues(ended: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Does this pass continue the rows of a pass that ended in unmasked padding: new token ids
    for as many rows (often one position each, the sampled token), none of them that padding,
    and a state carried in (a float tensor among the arguments: an RNN's hidden state, an
    attention cache)?"""
    values = [*args, *kwargs.values()]
    new = [v for v in values if isinstance(v, torch.Tensor) and v.dim() == 2
           and not v.is_floating_point() and v.dtype != torch.bool
           and v.shape[1 - ended["axis"]] == ended["batch"] and v.numel() <= MAX_HOST_TOKENS]
    if len(new) != 1 or bool((new[0] == ended["pad"]).any()):
        return False
    todo: list[Any] = values
    while todo:
        item = todo.pop()
        if isinstance(item, torch.Tensor) and item.is_floating_point():
            return True
        if isinstance(item, (tuple, list)):
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
    return False


def _before_real(pads: torch.Tensor, axis: int) -> torch.Tensor:
    """The padded positions followed by a real token in their row: padding a prediction is
    conditioned on (left padding, or padding inside a row), not the tail no target reads."""
    real = (~pads).to(torch.int32)
    later_real = real.flip(axis).cummax(axis).values.flip(axis).bool()
    return pads & later_real


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _name(place: int | str) -> str:
    return f"(argument {place})" if isinstance(place, int) else f"{place!r}"


def _aligned(x: torch.Tensor, target: torch.Tensor, axis: int) -> tuple[torch.Tensor, int] | None:
    """The targets laid out like `x` along time axis `axis`: (view, length) with length T
    (one target per input position) or T - 1 (inputs one longer than targets)."""
    t = x.shape[axis]
    if target.numel() == x.numel():
        return target.reshape(x.shape), t
    shape = list(x.shape)
    shape[axis] = t - 1
    if t >= 2 and target.numel() == math.prod(shape):
        return target.reshape(shape), t - 1
    return None


def _relation(x: torch.Tensor, target: torch.Tensor, valid: torch.Tensor
              ) -> torch.Tensor | None:
    """Per time-axis candidate (1, then 0): targets equal to x at the same position, their
    count; targets equal to x one position later, their count; two positions later (labels
    shifted twice), their count; as one device vector."""
    out = []
    for axis in (1, 0):
        aligned = _aligned(x, target, axis)
        if aligned is None:
            zero = torch.zeros((), device=x.device)
            out += [(zero, zero)] * 3
            continue
        y, _ = aligned
        ok = valid.reshape(y.shape)
        out += [_ahead(x, y, ok, axis, k) for k in (0, 1, 2)]
    return torch.stack([v.float() for part in out for v in part])


def _ahead(x: torch.Tensor, y: torch.Tensor, ok: torch.Tensor, axis: int, k: int
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """How many counted targets equal the input `k` positions after their own along `axis`
    (targets laid out as `_aligned` gives them), and how many were compared."""
    t, length = x.shape[axis], y.shape[axis]
    n = min(length, t - k)
    if n <= 0:
        zero = torch.zeros((), device=x.device)
        return zero, zero
    head = ok.narrow(axis, 0, n)
    return ((y.narrow(axis, 0, n) == x.narrow(axis, k, n)) & head).sum(), head.sum()


def _read_relation(values: list[float] | None) -> dict[int, dict[str, float]]:
    v = values or [0.0] * len(_RELATION)
    out = {}
    for axis, base in ((1, 0), (0, 6)):
        same, n, shifted, ns, twice, nt = v[base:base + 6]
        out[axis] = {"same": same / n if n else 0.0, "targets": n,
                     "shifted": shifted / ns if ns else 0.0,
                     "twice": twice / nt if nt else 0.0, "twice_targets": nt}
    return out


def _padding_counted(padded: _Padded, target: torch.Tensor, valid: torch.Tensor
                     ) -> torch.Tensor | None:
    """How many targets the loss counts at padded positions of the aligned input."""
    aligned = _aligned(padded.tokens, target, padded.time_axis)
    if aligned is None:
        return None
    y, length = aligned
    pads = padded.pads
    if length != pads.shape[padded.time_axis]:
        pads = pads.narrow(padded.time_axis, 1, length)    # target t is input t + 1
    return (pads & valid.reshape(y.shape)).sum()


def _call_for(args: tuple[Any, ...], kwargs: dict[str, Any], place: int | str, *,
              batch_dim: int, time_dim: int) -> dependence.Call:
    """The probe's call: the sequence at `place` taken out of the model's arguments."""
    if isinstance(place, int):
        x = args[place]
        rest = tuple(a for i, a in enumerate(args) if i != place)
        return dependence.Call(x.detach(), rest, dict(kwargs), place, batch_dim, time_dim)
    x = kwargs[place]
    rest_kw = {k: v for k, v in kwargs.items() if k != place}
    return dependence.Call(x.detach(), tuple(args), rest_kw, place, batch_dim, time_dim)


def _causal_finding(leak: dependence.CausalLeak, place: int | str, step: int) -> Finding:
    reads = ", ".join(map(str, leak.sources)) or "later ones"
    where = f"; it first appears in the output of {leak.module}" if leak.module else ""
    return Finding(
        "CAUSAL_LEAK",
        f"the run is next-token prediction, yet output position {leak.position} depends on "
        f"inputs after it (it moves when input position(s) {reads} change): the model reads "
        f"the token it must predict{where}",
        layer=leak.module,
        evidence={"position": leak.position, "reads_positions": leak.sources,
                  "module": leak.module, "modules_showing_it": leak.modules,
                  "positions_checked": leak.positions_checked, "length": leak.length,
                  "relative_change": float(f"{leak.relative_change:.2g}"), "argument": place},
        step=step)


__all__ = ["SequenceWatch", "WATCHED_CALLS"]
