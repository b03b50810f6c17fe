"""Does any output position depend on inputs after it? (Karpathy's test for a causal model.)

A next-token model must predict token t+1 from tokens 0..t. If attention is not masked, or the
mask is off by one, too weak (a finite bias instead of -inf) or built for another length, the
model reads the token it must predict: the training loss falls below what the data allows and
the model is useless for generation, where the future is not there to read. No error, no NaN.

The test changes the inputs after position k and checks that no output at a position <= k
moves, for every k (see `lesson.debugger.dependence`, which the debugger also runs on its own
when it sees a next-token run). It works on token ids (no gradient needed) and on float
features, batch-first (B, T, ...) or time-first (T, B, ...) inputs, models that take more
arguments (padding masks, a source sentence), and outputs that are tensors, tuples, dicts or
objects with `.logits`. The model runs in eval mode under a fixed seed (dropout off, random ops
repeatable) and is restored bitwise afterwards, also when it raises.

    >>> check_causality(model, tokens)                         # (B, T) token ids
    [Finding(code='CAUSAL_LEAK', layer='blocks.0.attn', evidence={'position': 0, ...})]
    >>> check_causality(model, tgt, args=(src,), input_at=1)   # model(src, tgt)
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from lesson.debugger.dependence import MAX_VARIANTS, Call, causal_leak
from lesson.findings import Finding
from lesson.restore import require_module


def check_causality(model: nn.Module, inputs: torch.Tensor, *, args: Sequence[Any] = (),
                    kwargs: Mapping[str, Any] | None = None, input_at: int | str = 0,
                    batch_first: bool = True, sample: int = 0, seed: int = 0,
                    max_variants: int = MAX_VARIANTS) -> list[Finding]:
    """CAUSAL_LEAK when an output position depends on inputs after it; [] when none does.

    `inputs`: the sequence, token ids (B, T) or features (B, T, F); `batch_first=False` for
    (T, B, ...). `args`/`kwargs`: the model's other arguments; the sequence goes at position
    `input_at` of the positional arguments, or under that keyword when it is a string. Other
    tensors with the batch's size in their batch (or first) dimension are cut to the probed
    sample. `sample`: which row of the batch is probed. The finding names the first output
    position that reads the future, the later positions it reads, and the module whose output
    first shows the dependence.
    """
    require_module(model)
    call = _call(inputs, args, kwargs, input_at, batch_first)
    if isinstance(sample, bool) or not isinstance(sample, int) \
            or not 0 <= sample < call.batch_size:
        raise ValueError(f"sample must be a row of the batch, 0..{call.batch_size - 1}, "
                         f"got {sample!r}")
    if isinstance(max_variants, bool) or not isinstance(max_variants, int) or max_variants < 1:
        raise ValueError(f"max_variants must be an integer >= 1, got {max_variants!r}")
    leak = causal_leak(model, call, sample=sample, seed=seed, max_variants=max_variants)
    if leak is None:
        return []
    reads = ", ".join(map(str, leak.sources)) or "later ones"
    where = f"; it first appears in the output of {leak.module}" if leak.module else ""
    return [Finding(
        "CAUSAL_LEAK",
        f"output position {leak.position} depends on inputs after it (it moves when input "
        f"position(s) {reads} change): the model reads the tokens it must predict{where}",
        layer=leak.module,
        evidence={"position": leak.position, "reads_positions": leak.sources,
                  "module": leak.module, "modules_showing_it": leak.modules,
                  "leaking_positions": leak.leaking_positions[:16],
                  "positions_checked": leak.positions_checked, "length": leak.length,
                  "relative_change": float(f"{leak.relative_change:.2g}"),
                  "batch_first": batch_first, "sample": sample})]


def _call(inputs: Any, args: Any, kwargs: Any, input_at: int | str, batch_first: bool) -> Call:
    """The model call to probe, with every argument checked."""
    if not isinstance(inputs, torch.Tensor):
        raise TypeError(f"inputs must be a torch.Tensor, got {type(inputs).__name__}")
    if inputs.dtype == torch.bool or inputs.is_complex():
        raise TypeError(f"inputs must be token ids (an integer tensor) or float features, "
                        f"got {inputs.dtype}")
    if inputs.dim() < 2:
        raise ValueError(f"inputs must have a batch and a time dimension ((B, T) token ids or "
                         f"(B, T, F) features), got shape {tuple(inputs.shape)}")
    if not isinstance(batch_first, bool):
        raise TypeError(f"batch_first must be True or False, got {batch_first!r}")
    batch_dim, time_dim = (0, 1) if batch_first else (1, 0)
    if inputs.shape[batch_dim] < 1:
        raise ValueError(f"the batch is empty (shape {tuple(inputs.shape)})")
    if inputs.shape[time_dim] < 2:
        raise ValueError(f"a sequence of {inputs.shape[time_dim]} position(s) has no future to "
                         f"leak (shape {tuple(inputs.shape)}, batch_first={batch_first})")
    if not inputs.is_floating_point() and int(inputs.min()) < 0:
        raise ValueError("token ids must be >= 0 (found negative ids: pass the model's "
                         "inputs, not targets with an ignore_index)")
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise TypeError(f"args must be a tuple or list of the model's other positional "
                        f"arguments, got {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(f"kwargs must be a dict of keyword arguments, got "
                        f"{type(kwargs).__name__}")
    if isinstance(input_at, bool) or not isinstance(input_at, (int, str)):
        raise TypeError(f"input_at must be a position (int) or a keyword (str), got "
                        f"{input_at!r}")
    if isinstance(input_at, int) and not 0 <= input_at <= len(args):
        raise ValueError(f"input_at={input_at} is not a place among {len(args)} other "
                         "positional argument(s)")
    if isinstance(input_at, str) and kwargs is not None and input_at in kwargs:
        raise ValueError(f"kwargs already holds {input_at!r}, where the sequence goes")
    return Call(inputs.detach(), tuple(args), dict(kwargs or {}), input_at, batch_dim, time_dim)


__all__ = ["check_causality"]
