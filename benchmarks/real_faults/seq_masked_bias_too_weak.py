"""A causal mask written as a finite bias: a model trained at a high learning rate pushes its
visible scores below it and reads the future through the mask.

karpathy/minGPT#75 (also huggingface/transformers#17121, "Perfect training and evaluation
loss, but terrible test-time performance"): GPT-2's attention replaced the masked scores by
`self.masked_bias` (-1e4) with `torch.where(causal_mask, attn_weights, masked_bias)`. At high
enough learning rates the network drove its visible scores below -1e4 (the report shows
-15258, -16940 against the masks' -10000), so the masked keys won the softmax: almost zero
training and validation loss, and nonsense when generating from incomplete sequences. The fix
is a mask no score can pass (the dtype's minimum, or -inf). Reproduced small: GPT-2's
attention (one `c_attn` projection, the `bias` buffer of a lower triangle, the masked scores
replaced by a constant) trained with Adam at a high rate. Scaled down: a model this small
does not drive its scores past -20 or -1e4 in a few hundred steps (tried: no leak), so the
constant is -4, a few units below the scores it starts with. Unlike GPT-2's -1e4, that lets
e^-4 of the weight through from the first step; the leak then grows as the model learns to
use it. (With -5, 512 texts and 300 steps the validation loss got under the floor by the
symptom's margin on 5 of seeds 0-9 only, though the debugger saw the leak on all ten; with -4,
2048 texts and 450 steps it is 0.35-0.50 nats under it on seeds 0-19, the fixed twin 0.05-0.08
above it.)
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .harness import Fault, Script
from .language import VOCAB, below_floor, flat_cross_entropy, next_token_split

LENGTH = 25
MASKED_BIAS = -4.0


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, length: int, bug: bool) -> None:
        super().__init__()
        self.heads, self.c_attn, self.c_proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.register_buffer("bias", torch.tril(torch.ones(length, length, dtype=torch.bool)))
        self.masked_bias = MASKED_BIAS if bug else float("-inf")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2)
                   for z in self.c_attn(x).split(d, dim=2))
        w = q @ k.transpose(-1, -2) / math.sqrt(v.shape[-1])
        w = torch.where(self.bias[:t, :t], w, torch.tensor(self.masked_bias, dtype=w.dtype))
        return self.c_proj((F.softmax(w, dim=-1) @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, length: int, bug: bool) -> None:
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d), Attention(d, heads, length, bug)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, bug: bool, d: int = 32, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB + 1, d), nn.Embedding(LENGTH, d)
        self.h = nn.ModuleList(Block(d, heads, LENGTH, bug) for _ in range(layers))
        self.ln_f, self.lm_head = nn.LayerNorm(d), nn.Linear(d, VOCAB + 1, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def build(bug: bool, seed: int) -> Script:
    data, _ = next_token_split(seed, LENGTH, n_train=2048)
    model = GPT2(bug)
    return Script(model, data, flat_cross_entropy,
                  torch.optim.Adam(model.parameters(), lr=3e-2), steps=450, batch=32,
                  eval_every=50)


FLOOR = next_token_split(0, LENGTH, 2, 2)[1]

FAULT = Fault("causal mask as a finite bias the scores learn to pass",
              "karpathy/minGPT#75; huggingface/transformers#17121", "sequence", ("CAUSAL_LEAK",),
              "near-zero training and validation loss, nonsense when generating",
              lambda r: below_floor(r, FLOOR), build, blame="h.0")
