"""Padding: which token id pads a batch of sequences, and where the padding is.

Sequences of different lengths are batched by filling the short ones up with a padding id,
after their tokens (right padding) or before them (left padding). The debugger needs the pad
id to see padding counted in the loss, attention on padded keys, a read at a padded position,
and generation on padding. It takes it from what the model is given:

* the padding masks passed to the model by name, in PyTorch's convention (`key_padding_mask`,
  `src_key_padding_mask`, `padding_mask`, ...: True or -inf at the padding) or the Hugging Face
  one (`attention_mask`: 1 at the real tokens, 0 at the padding): the id found at every padded
  position is the pad id;
* otherwise the token that fills row tails (or heads): at least MIN_PADDED_ROWS rows end
  (begin) with a run of it at least MIN_RUN long, the runs are of different lengths or some
  rows have none (a batch padded to its longest row), and the id hardly occurs anywhere
  else. An end-of-text token that closes every row once is not padding, nor a token that ends
  a few rows by chance;
* an embedding's padding_idx, when it ends (begins) MIN_PADDED_ROWS rows and occurs nowhere
  else (named beforehand, it needs no run: every row may get as much padding).

The search runs on the host, on the first statistics steps until an id is found; masks of where
the padding lies are then computed on the batch's own device.
"""
from __future__ import annotations

from typing import Any

import torch

MIN_PADDED_ROWS = 2
"""Rows that must end (or begin) with runs of one token for it to be called padding: one row
ending with a repeated token is no evidence..."""

MIN_RUN = 2
"""...each of those runs at least this long (a single closing token is an end-of-text mark).
With runs of one allowed past the first, a token of random text was taken for padding in 0.5-
2.5% of small batches (4 x 20 and 8 x 12 ids of 12 or 50, read either way round); with two runs
of two, in at most 0.07% of them (3,000 batches per shape, 3 x 5 ids aside)."""

MAX_INSIDE_SHARE = 0.01
"""...and at most this share of the id's occurrences in the batch lie elsewhere than in those
runs: padding is not text. A token that ends some rows by chance (a repeated letter, a
Markov chain that stays put) occurs inside the rows too."""

MASKED_VALUE = -1e4
"""A float padding mask marks padding with -inf (or a large negative number): at or below this."""

PYTORCH_MASKS = ("key_padding_mask", "padding_mask", "pad_mask")
"""Keyword names (or their endings: src_key_padding_mask, tgt_key_padding_mask, ...) of masks
that are True (or -inf) at the padding."""

HF_MASKS = ("attention_mask",)

NOT_TOKENS = ("label", "target", "mask")
"""Keyword arguments whose names hold these words are not the model's token inputs (labels
with -100 at the padding, masks)."""
"""Keyword names of masks that are 1 at the real tokens and 0 at the padding."""


def padding_of_mask(name: str, mask: Any, shape: torch.Size) -> torch.Tensor | None:
    """Where a mask given under keyword `name` says the padding is (True there), by the
    convention its name promises; None for other arguments or shapes."""
    if not isinstance(mask, torch.Tensor) or mask.shape != shape:
        return None
    lower = name.lower()
    if any(lower.endswith(n) for n in PYTORCH_MASKS):
        if mask.dtype == torch.bool:
            return mask
        if mask.is_floating_point():
            return mask <= MASKED_VALUE
        return mask != 0
    if any(lower.endswith(n) for n in HF_MASKS):
        return mask == 0 if mask.dtype != torch.bool else ~mask
    return None


def pad_from_mask(tokens: torch.Tensor, padding: torch.Tensor) -> int | None:
    """The one id found at every position the mask calls padding (host tensors), if one is."""
    if not padding.any() or padding.all():
        return None
    ids = torch.unique(tokens[padding])
    return int(ids[0]) if len(ids) == 1 else None


def tail_runs(rows: torch.Tensor, pad: int, side: str) -> torch.Tensor:
    """Per row of a (B, T) tensor, the length of its run of `pad` at the end ("right") or the
    start ("left")."""
    eq = (rows == pad).to(torch.int32)
    if side == "right":
        eq = eq.flip(-1)
    return eq.cumprod(-1).sum(-1)


def filler(tokens: torch.Tensor, time_axis: int) -> tuple[int, str] | None:
    """(pad id, "right"/"left") when one token fills row tails or heads as padding does (see
    the module doc); None otherwise, and None when the other ends are filled by another id in
    runs at least as long (a row is padded at one end: a short title whose first tokens repeat,
    followed by long padding, is not left-padded). `tokens` is a (B, T) host tensor, time along
    `time_axis`."""
    rows = tokens.movedim(time_axis, -1)
    if rows.dim() != 2 or rows.shape[0] < MIN_PADDED_ROWS or rows.shape[1] < MIN_RUN + 1:
        return None
    fills = {side: _fill(rows, side) for side in ("right", "left")}
    for side, other in (("right", "left"), ("left", "right")):
        found = fills[side]
        if found is None or not found[2]:
            continue
        rival = fills[other]
        if rival is not None and rival[0] != found[0] and rival[1] >= found[1]:
            return None     # the other ends are filled by another id in runs as long: ambiguous
        return found[0], side
    return None


def _fill(rows: torch.Tensor, side: str) -> tuple[int, float, bool] | None:
    """The token that fills the rows' ends on `side` in runs as padding does, if one does:
    (id, its mean run over the rows it ends, whether the runs differ in length as a batch
    padded to its longest row has them)."""
    column = rows[:, -1] if side == "right" else rows[:, 0]
    values, counts = torch.unique(column, return_counts=True)
    best = int(counts.argmax())
    if int(counts[best]) < MIN_PADDED_ROWS:
        return None
    pad = int(values[best])
    runs = tail_runs(rows, pad, side)
    inside = int((rows == pad).sum() - runs.sum())
    if int((runs >= MIN_RUN).sum()) < MIN_PADDED_ROWS or int(runs.max()) >= rows.shape[1] \
            or inside > MAX_INSIDE_SHARE * int((rows == pad).sum()):
        return None
    return pad, float(runs[runs > 0].float().mean()), len(torch.unique(runs)) >= 2


def ends_with(tokens: torch.Tensor, pad: int, time_axis: int) -> tuple[int, str] | None:
    """(pad, "right"/"left") when a pad id named beforehand (an embedding's padding_idx) ends
    (begins) at least MIN_PADDED_ROWS rows of a (B, T) host tensor and occurs nowhere else:
    padding, even when every row got as much of it."""
    rows = tokens.movedim(time_axis, -1)
    if rows.dim() != 2 or rows.shape[1] < 2:
        return None
    total = int((rows == pad).sum())
    for side in ("right", "left"):
        runs = tail_runs(rows, pad, side)
        if int((runs > 0).sum()) >= MIN_PADDED_ROWS and int(runs.sum()) == total \
                and int(runs.max()) < rows.shape[1]:
            return pad, side
    return None


def pad_positions(tokens: torch.Tensor, pad: int, time_axis: int, side: str = "both"
                  ) -> torch.Tensor:
    """True where `tokens` holds padding: the run of the pad id at the end of each row
    ("right"), at its start ("left"), or either ("both"); a pad id inside a row (an
    end-of-text token used as padding) is text. Computed on the tokens' device, in their
    layout."""
    eq = (tokens == pad).to(torch.int32)
    head = eq.cumprod(time_axis) if side in ("left", "both") else torch.zeros_like(eq)
    tail = eq.flip(time_axis).cumprod(time_axis).flip(time_axis) \
        if side in ("right", "both") else torch.zeros_like(eq)
    return (head + tail) > 0


def side_of(padding: torch.Tensor, time_axis: int = 1) -> str:
    """"right" when every padded position of a (B, T) host mask ends its row, "left" when
    every one starts it, else "both"."""
    rows = padding.movedim(time_axis, -1).to(torch.int32)
    tails = rows.flip(-1).cumprod(-1).flip(-1).bool()
    heads = rows.cumprod(-1).bool()
    if bool((tails == rows.bool()).all()):
        return "right"
    if bool((heads == rows.bool()).all()):
        return "left"
    return "both"


def token_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[int | str,
                                                                            torch.Tensor]]:
    """The model's arguments that look like batches of token ids: integer, 2-dimensional,
    with a few positions at least (place: an index into args or a keyword)."""
    found: list[tuple[int | str, torch.Tensor]] = []
    for place, value in list(enumerate(args)) + list(kwargs.items()):
        if isinstance(value, torch.Tensor) and value.dim() == 2 and value.numel() >= 4 \
                and not value.is_floating_point() and value.dtype != torch.bool \
                and not value.is_complex() and min(value.shape) >= 2:
            if isinstance(place, str) and (
                    padding_of_mask(place, value, value.shape) is not None
                    or any(w in place.lower() for w in NOT_TOKENS)):
                continue                            # an attention_mask or labels, not tokens
            found.append((place, value))
    return found


__all__ = ["padding_of_mask", "pad_from_mask", "filler", "ends_with", "pad_positions", "side_of", "tail_runs",
           "token_tensors", "MIN_PADDED_ROWS", "MIN_RUN"]
