"""Weights meant to be one tensor that are two: copies that training pulls apart.

A language model usually ties its output head to its input embedding (the same (vocab, d)
matrix reads tokens in and scores them out). Copying the values (`head.weight.data.copy_(
embed.weight.data)`, or `nn.Parameter(embed.weight.clone())`) instead of sharing the Parameter
(`head.weight = embed.weight`) gives two tensors that start equal and are trained apart: twice
the parameters, and a head that does not share what the embedding learns.

`equal_copies(model)` finds, at the start of training, pairs of trainable parameters that are
bitwise equal (also transposed) while being distinct tensors; `drifted(pairs)` tells which of
them differ later. Only pairs from modules of different kinds count (an embedding and a linear
head): layers cloned on purpose (nn.TransformerEncoder deep-copies its layer; ensembles and
siamese towers start from one init) are the same kind of module and are meant to drift apart,
and tensors of one repeated value (LayerNorm's ones, zero biases) are equal by construction.
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

MIN_ELEMENTS = 16
"""Parameters smaller than this are not compared (a scalar temperature equal to another)."""


def _owners(model: nn.Module) -> dict[int, nn.Module]:
    """id(parameter) -> the module that holds it directly."""
    return {id(p): m for m in model.modules() for p in m._parameters.values() if p is not None}


@torch.no_grad()
def equal_copies(model: nn.Module, params: Iterable[tuple[str, nn.Parameter]]
                 ) -> list[tuple[str, str, nn.Parameter, nn.Parameter, bool]]:
    """(name a, name b, a, b, transposed) for trainable parameters that are equal copies."""
    owners = _owners(model)
    groups: dict[tuple[int, ...], list[tuple[str, nn.Parameter, bool]]] = {}
    for name, p in params:
        if p.numel() < MIN_ELEMENTS or p.is_meta or not p.requires_grad:
            continue
        key = tuple(sorted(p.shape)) + (p.numel(),)
        groups.setdefault(key, []).append((name, p, False))
    pairs = []
    for members in groups.values():
        if len(members) < 2:
            continue
        for i, (na, a, _) in enumerate(members):
            if bool((a == a.reshape(-1)[0]).all()):
                continue                           # one value repeated: equal by construction
            for nb, b, _ in members[i + 1:]:
                oa, ob = owners.get(id(a)), owners.get(id(b))
                if oa is not ob and type(oa) is type(ob):
                    continue                       # two layers of one kind: clones on purpose
                for transposed in (False, True):
                    other = b.t() if transposed and b.dim() == 2 else b
                    if other.shape == a.shape and torch.equal(a, other):
                        pairs.append((na, nb, a, b, transposed))
                        break
    return pairs


@torch.no_grad()
def drifted(pairs: list[tuple[str, str, nn.Parameter, nn.Parameter, bool]]
            ) -> list[tuple[str, str, float]]:
    """The pairs that are no longer equal: (name a, name b, ||a - b|| / ||a||)."""
    out = []
    for na, nb, a, b, transposed in pairs:
        other = b.t() if transposed else b
        if other.shape != a.shape or torch.equal(a, other):
            continue
        gap = torch.linalg.vector_norm((a - other).float()) / \
            torch.linalg.vector_norm(a.float()).clamp_min(1e-30)
        out.append((na, nb, float(gap)))
    return out


__all__ = ["equal_copies", "drifted"]
