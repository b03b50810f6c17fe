"""A wrapper around the attention layer that takes `is_causal` and never passes it on.

keras-team/keras#21284 ("MultiHeadAttention's use_causal_mask is broken"): the reporter's
model leaked the future; the maintainer found the bug in the reporter's own layer,
`def call(self, x, mask=None, use_causal_mask=False): return self.mha(x, x,
attention_mask=mask, use_causal_mask=False)`: the flag its callers set was never forwarded,
so the causal mask was always off. Reproduced in PyTorch with the same wrapper around
`nn.MultiheadAttention` (its causal mask built from the flag), in a small post-LN decoder.
"""
from __future__ import annotations

import torch
from torch import nn

from .harness import Fault, Script
from .language import VOCAB, below_floor, flat_cross_entropy, next_token_split

LENGTH = 25


class DotProductAttention(nn.Module):
    def __init__(self, d: int, heads: int, bug: bool) -> None:
        super().__init__()
        self.bug, self.mha = bug, nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                is_causal: bool = False) -> torch.Tensor:
        if self.bug:
            is_causal = False           # the wrapper's call hard-codes the flag
        if is_causal and mask is None:
            mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.mha(x, x, x, attn_mask=mask, need_weights=False)[0]


class Block(nn.Module):
    def __init__(self, d: int, heads: int, bug: bool) -> None:
        super().__init__()
        self.attention, self.norm1 = DotProductAttention(d, heads, bug), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
        self.norm2 = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x, is_causal=True))
        return self.norm2(x + self.ff(x))


class LM(nn.Module):
    def __init__(self, bug: bool, d: int = 32, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(VOCAB + 1, d), nn.Embedding(LENGTH, d)
        self.blocks = nn.Sequential(*(Block(d, heads, bug) for _ in range(layers)))
        self.head = nn.Linear(d, VOCAB + 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1]))
        return self.head(self.blocks(h))


def warmup(optimizer: torch.optim.Optimizer, steps: int = 20) -> torch.optim.lr_scheduler.LambdaLR:
    """A linear warm-up, as post-LN layers want."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / steps))


def build(bug: bool, seed: int) -> Script:
    data, _ = next_token_split(seed, LENGTH)
    model = LM(bug)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    return Script(model, data, flat_cross_entropy, opt, steps=200, batch=32, eval_every=40,
                  scheduler=warmup(opt), scheduler_per_batch=True)


FLOOR = next_token_split(0, LENGTH, 2, 2)[1]

FAULT = Fault("a wrapper that takes the causal flag and never forwards it",
              "keras-team/keras#21284", "sequence", ("CAUSAL_LEAK",),
              "the model reads the future: the loss falls far below what the text allows",
              lambda r: below_floor(r, FLOOR), build, blame="blocks.0")
