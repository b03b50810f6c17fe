"""An attention layer whose fused path applies the causal mask and whose manual path (taken
when attention dropout is on) forgets it.

keras-team/keras#23038: since #22910 ("Engage flash SDPA in MHA/GQA causal-only path"),
`MultiHeadAttention(..., dropout > 0)` called with `use_causal_mask=True` silently applied no
causal mask: the causal flag went only to the fused scaled-dot-product call, and the manual
path (taken for dropout > 0, `return_attention_scores=True` or non-4-D inputs) built its mask
from `attention_mask` alone, so "every query attends to every key, including strictly-future
positions" (metrics such as AUC inflating towards 1.0). PR #23040 materialises the causal mask
in the manual path. Reproduced with a hand-written attention module of the same two paths in
a small decoder trained with attention dropout 0.1.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .harness import Fault, Script
from .language import VOCAB, below_floor, flat_cross_entropy, next_token_split

LENGTH = 25


class MultiHeadAttention(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float, bug: bool) -> None:
        super().__init__()
        self.heads, self.dropout, self.bug = heads, dropout, bug
        self.query, self.key, self.value = (nn.Linear(d, d) for _ in range(3))
        self.output = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                use_causal_mask: bool = False) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (f(x).view(b, t, self.heads, -1).transpose(1, 2)
                   for f in (self.query, self.key, self.value))
        if self.dropout == 0.0 and attention_mask is None:        # the fused path
            out = F.scaled_dot_product_attention(q, k, v, is_causal=use_causal_mask)
        else:                                                      # the manual path
            mask = attention_mask
            if use_causal_mask and not self.bug:
                causal = torch.ones(t, t, dtype=torch.bool).tril()
                mask = causal if mask is None else mask & causal
            scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = F.dropout(scores.softmax(-1), self.dropout, self.training)
            out = weights @ v
        return self.output(out.transpose(1, 2).reshape(b, t, d))


class Decoder(nn.Module):
    def __init__(self, bug: bool, d: int = 32, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(VOCAB + 1, d), nn.Embedding(LENGTH, d)
        self.attention = nn.ModuleList(MultiHeadAttention(d, heads, 0.1, bug) for _ in range(layers))
        self.norm1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.norm2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.ff = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
                                for _ in range(layers))
        self.head = nn.Linear(d, VOCAB + 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1]))
        for att, n1, n2, ff in zip(self.attention, self.norm1, self.norm2, self.ff):
            h = n1(h + att(h, use_causal_mask=True))
            h = n2(h + ff(h))
        return self.head(h)


def build(bug: bool, seed: int) -> Script:
    data, _ = next_token_split(seed, LENGTH)
    model = Decoder(bug)
    return Script(model, data, flat_cross_entropy, torch.optim.Adam(model.parameters(), lr=3e-3),
                  steps=200, batch=32, eval_every=40)


FLOOR = next_token_split(0, LENGTH, 2, 2)[1]

FAULT = Fault("causal mask dropped on the attention layer's manual (dropout) path",
              "keras-team/keras#23038 (fixed by PR #23040)", "sequence", ("CAUSAL_LEAK",),
              "metrics inflate towards perfect: every query attends to the future keys",
              lambda r: below_floor(r, FLOOR), build, blame="attention.0")
