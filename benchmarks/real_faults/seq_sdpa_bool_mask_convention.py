"""The causal mask of `nn.MultiheadAttention`'s convention (True = hidden) passed to
`F.scaled_dot_product_attention`, where True means "may attend": each query sees only the
future.

rasbt/LLMs-from-scratch#1061: the chapter-3 bonus attention without FlashAttention built
`attn_mask = torch.triu(..., diagonal=1).bool()` (the upper triangle, True on the keys to hide,
as `nn.MultiheadAttention` wants) and passed it to `scaled_dot_product_attention`, for which
True marks the keys that take part; the maintainer: "It's kind of confusing because it seems
opposite of nn.MultiheadAttention". The fix is `~attn_mask`. Reproduced in a small GPT whose
attention module holds the upper triangle as a buffer, as the book's does.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .harness import Fault, Script
from .language import VOCAB, below_floor, flat_cross_entropy, next_token_split

LENGTH = 25


class MHAPyTorchSDPAWithoutFlash(nn.Module):
    def __init__(self, d: int, heads: int, context_length: int, bug: bool) -> None:
        super().__init__()
        self.heads, self.bug = heads, bug
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length),
                                                diagonal=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attn_mask = self.mask.bool()[:t, :t]
        if not self.bug:
            attn_mask = ~attn_mask        # SDPA: True = the key takes part
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.proj(context.transpose(1, 2).reshape(b, t, d))


class TransformerBlock(nn.Module):
    def __init__(self, d: int, heads: int, bug: bool) -> None:
        super().__init__()
        self.norm1, self.att = nn.LayerNorm(d), MHAPyTorchSDPAWithoutFlash(d, heads, LENGTH, bug)
        self.norm2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.att(self.norm1(x))
        return x + self.ff(self.norm2(x))


class GPTModel(nn.Module):
    def __init__(self, bug: bool, d: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(VOCAB + 1, d), nn.Embedding(LENGTH, d)
        self.trf_blocks = nn.Sequential(*(TransformerBlock(d, heads, bug) for _ in range(layers)))
        self.final_norm, self.out_head = nn.LayerNorm(d), nn.Linear(d, VOCAB + 1, bias=False)

    def forward(self, in_idx: torch.Tensor) -> torch.Tensor:
        x = self.tok_emb(in_idx) + self.pos_emb(torch.arange(in_idx.shape[1]))
        return self.out_head(self.final_norm(self.trf_blocks(x)))


def build(bug: bool, seed: int) -> Script:
    data, _ = next_token_split(seed, LENGTH)
    model = GPTModel(bug)
    return Script(model, data, flat_cross_entropy,
                  torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1), steps=200,
                  batch=32, eval_every=40)


FLOOR = next_token_split(0, LENGTH, 2, 2)[1]

FAULT = Fault("MultiheadAttention's mask convention given to scaled_dot_product_attention",
              "rasbt/LLMs-from-scratch#1061", "sequence", ("CAUSAL_LEAK",),
              "the loss falls far below what the text allows: every query reads the future",
              lambda r: below_floor(r, FLOOR), build, blame="trf_blocks.0")
