"""A Linformer decoder: the keys and values are projected along the sequence before the causal
mask is applied, so every projected key already holds the future.

tatp22/linformer-pytorch#16 ("causal_mask of the decoder"): "the shape of attention matrix is
(n, k), only the (k, k) part is masked. Does it work?" The maintainer: "Yes, this is an issue.
To be honest, I don't know how I would get across this." `gen_causal_mask(input_size, dim_k)`
masks the upper triangle of the (n, k) score matrix, but the k projected keys are learned
mixtures (`E`, an `nn.Linear` over the sequence axis) of all n positions, later ones
included; a Linformer cannot be made causal that way (lucidrains/linformer#4, and the
Hugging Face port dropped `is_decoder` for it, transformers PR #10587). The fix is the
repository's `full_attention=True`: (n, n) scores under an ordinary causal mask.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .harness import Fault, Script
from .language import VOCAB, below_floor, flat_cross_entropy, next_token_split

LENGTH, DIM_K = 25, 8
N = LENGTH - 1


def gen_causal_mask(input_size: int, dim_k: int, full_attention: bool = False) -> torch.Tensor:
    """True where a query may look: (n, n) for full attention, (n, k) for the Linformer."""
    if full_attention:
        return (torch.triu(torch.ones(input_size, input_size)) == 1).transpose(0, 1)
    return (torch.triu(torch.ones(dim_k, input_size)) == 1).transpose(0, 1)


class LinearAttentionHead(nn.Module):
    def __init__(self, d: int, full_attention: bool) -> None:
        super().__init__()
        self.full_attention = full_attention
        if not full_attention:
            self.E, self.F = nn.Linear(N, DIM_K), nn.Linear(N, DIM_K)   # over the sequence
        self.register_buffer("mask", gen_causal_mask(N, DIM_K, full_attention))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if not self.full_attention:
            k = self.E(k.transpose(1, 2)).transpose(1, 2)       # (B, k, d): mixes all n
            v = self.F(v.transpose(1, 2)).transpose(1, 2)
        scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~self.mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


class Layer(nn.Module):
    def __init__(self, d: int, full_attention: bool) -> None:
        super().__init__()
        self.to_q, self.to_k, self.to_v = (nn.Linear(d, d) for _ in range(3))
        self.head, self.w_o = LinearAttentionHead(d, full_attention), nn.Linear(d, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.w_o(self.head(self.to_q(h), self.to_k(h), self.to_v(h)))
        return x + self.ff(self.norm2(x))


class LinformerLM(nn.Module):
    def __init__(self, bug: bool, d: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(VOCAB + 1, d), nn.Embedding(N, d)
        self.layers = nn.Sequential(*(Layer(d, full_attention=not bug) for _ in range(layers)))
        self.to_logits = nn.Linear(d, VOCAB + 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.to_logits(self.layers(self.embed(tokens) + self.pos(torch.arange(N))))


def build(bug: bool, seed: int) -> Script:
    data, _ = next_token_split(seed, LENGTH)
    model = LinformerLM(bug)
    return Script(model, data, flat_cross_entropy, torch.optim.Adam(model.parameters(), lr=3e-3),
                  steps=200, batch=32, eval_every=40)


FLOOR = next_token_split(0, LENGTH, 2, 2)[1]

FAULT = Fault("Linformer decoder: keys projected along the sequence, then masked",
              "tatp22/linformer-pytorch#16", "sequence", ("CAUSAL_LEAK",),
              "a causal LM that beats what the text allows: the projected keys hold the future",
              lambda r: below_floor(r, FLOOR), build, blame="layers.0")
