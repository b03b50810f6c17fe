"""A float 0/1 lower triangle given as `attn_mask` to `nn.MultiheadAttention`: float masks are
added to the scores, so the future is not hidden at all.

pytorch/pytorch#21518 ("`attn_mask` in nn.MultiheadAttention is additive"): the mask was
written as the multiplicative 1 = keep, 0 = hide, `attn_mask = torch.tril(torch.ones((8, 8)))`
with `mha(inputs, inputs, inputs, attn_mask=attn_mask)` on (time, batch, features) inputs, "to
enforce causality, but the returned attention weights suggest" otherwise: a float mask is added
to the scores (+1 on the past, +0 on the future), and nothing is hidden. The fix is
`nn.Transformer.generate_square_subsequent_mask(T)` (-inf above the diagonal) or a bool mask.
Reproduced as in the report: `nn.MultiheadAttention` with its default (time, batch) layout, in
a small decoder that transposes its batch-first tokens for it.
"""
from __future__ import annotations

import torch
from torch import nn

from .harness import Fault, Script
from .language import VOCAB, below_floor, flat_cross_entropy, next_token_split

LENGTH = 25


class Layer(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.mha, self.norm1 = nn.MultiheadAttention(d, heads), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.norm2 = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.mha(h, h, h, attn_mask=attn_mask, need_weights=False)[0]
        return x + self.ff(self.norm2(x))


class LM(nn.Module):
    def __init__(self, bug: bool, d: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.bug = bug
        self.embed, self.pos = nn.Embedding(VOCAB + 1, d), nn.Embedding(LENGTH, d)
        self.layers = nn.ModuleList(Layer(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, VOCAB + 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        if self.bug:
            attn_mask = torch.tril(torch.ones((t, t)))       # meant as 1 = attend, 0 = hide
        else:
            attn_mask = nn.Transformer.generate_square_subsequent_mask(t)
        x = (self.embed(tokens) + self.pos(torch.arange(t))).transpose(0, 1)   # (T, B, D)
        for layer in self.layers:
            x = layer(x, attn_mask)
        return self.head(x.transpose(0, 1))


def build(bug: bool, seed: int) -> Script:
    data, _ = next_token_split(seed, LENGTH)
    model = LM(bug)
    return Script(model, data, flat_cross_entropy, torch.optim.Adam(model.parameters(), lr=3e-3),
                  steps=200, batch=32, eval_every=40)


FLOOR = next_token_split(0, LENGTH, 2, 2)[1]

FAULT = Fault("float 0/1 causal mask added to the scores instead of hiding the future",
              "pytorch/pytorch#21518", "sequence", ("CAUSAL_LEAK",),
              "the attention weights show the future: the loss falls far below what the text allows",
              lambda r: below_floor(r, FLOOR), build, blame="layers.0")
