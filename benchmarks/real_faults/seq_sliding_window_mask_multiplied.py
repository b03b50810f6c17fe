"""Sliding-window layers that multiply the additive causal mask by a 0/1 window: the future
becomes visible.

huggingface/transformers#31673 ("Label Leakage in Gemma 2 Finetuning"): fine-tuning Gemma 2,
the training loss quickly dropped to 0. Its sliding-window layers did
`attention_mask = attention_mask * torch.tril(torch.ones_like(attention_mask),
diagonal=-self.sliding_window)`, treating the 4-D additive mask (0 where a key is visible, the
dtype's minimum where it is not) as a 2-D 0/1 mask: the product is 0 everywhere, so every key,
the future's included, became visible in every other layer. PR #31674 hides the keys outside
the window with `torch.where(window, min_dtype, attention_mask)`. Reproduced small: a
Gemma-style decoder (RMSNorm before and after each block, GeGLU feed-forward,
`F.scaled_dot_product_attention` with the 4-D float mask), its layers alternating sliding and
global, fed `input_ids` and an attention mask of 1s as the Trainer does.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .harness import Fault, Script
from .language import VOCAB, below_floor, flat_cross_entropy, next_token_split

LENGTH, WINDOW = 25, 4


class RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + self.weight)


class DecoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, sliding: bool, bug: bool) -> None:
        super().__init__()
        self.heads, self.is_sliding, self.bug = heads, sliding, bug
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False)
        self.down = nn.Linear(2 * d, d, bias=False)
        self.norms = nn.ModuleList(RMSNorm(d) for _ in range(4))

    def forward(self, h: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.is_sliding:
            window = torch.tril(torch.ones_like(attention_mask), diagonal=-WINDOW)
            if self.bug:     # the 4-D additive mask treated as a 0/1 one: all of it becomes 0
                attention_mask = attention_mask * window
            else:
                attention_mask = torch.where(window.bool(), torch.finfo(h.dtype).min,
                                             attention_mask)
        b, t, d = h.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2)
                   for z in self.qkv(self.norms[0](h)).split(d, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        h = h + self.norms[1](self.o(a.transpose(1, 2).reshape(b, t, d)))
        x = self.norms[2](h)
        return h + self.norms[3](self.down(F.gelu(self.gate(x), approximate="tanh") * self.up(x)))


class Gemma2ForCausalLM(nn.Module):
    def __init__(self, bug: bool, d: int = 32, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB + 1, d)
        self.pos = nn.Embedding(LENGTH, d)
        self.layers = nn.ModuleList(DecoderLayer(d, heads, i % 2 == 0, bug) for i in range(layers))
        self.norm = RMSNorm(d)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
                ) -> torch.Tensor:
        b, t = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        h = self.embed(input_ids) * self.embed.embedding_dim ** 0.5 + self.pos(torch.arange(t))
        dtype_min = torch.finfo(h.dtype).min
        hidden = (torch.ones(t, t, dtype=torch.bool).triu(1)[None, None]
                  | (attention_mask[:, None, None, :] == 0))
        mask = torch.zeros(b, 1, t, t).masked_fill(hidden, dtype_min)   # 4-D, additive
        for layer in self.layers:
            h = layer(h, mask)
        return self.norm(h) @ self.embed.weight.t()      # the head is the embedding


def step(s: Script, loss_fn, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s.optimizer.zero_grad()
    loss = loss_fn(s.model(input_ids=x, attention_mask=torch.ones_like(x)), y)
    loss.backward()
    s.optimizer.step()
    return loss


def build(bug: bool, seed: int) -> Script:
    data, _ = next_token_split(seed, LENGTH)
    model = Gemma2ForCausalLM(bug)
    with torch.no_grad():
        model.embed.weight.normal_(0, 0.02)
    return Script(model, data, flat_cross_entropy,
                  torch.optim.AdamW(model.parameters(), lr=3e-3), steps=200, batch=32,
                  step=step, eval_every=40)


FLOOR = next_token_split(0, LENGTH, 2, 2)[1]

FAULT = Fault("sliding-window layers multiply the additive causal mask by a 0/1 window",
              "huggingface/transformers#31673 (fixed by PR #31674)", "sequence", ("CAUSAL_LEAK",),
              "fine-tuning loss quickly drops to 0: the labels leak through the sliding layers",
              lambda r: below_floor(r, FLOOR), build, blame="layers.0")
