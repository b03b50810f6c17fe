"""A language-model head whose loss compares the logits at each position with the label at the
same position: the model is trained to repeat the token it is given.

huggingface/transformers PR #404 ("Fix Language Modeling Loss"): `OpenAIGPTLMHeadModel` and
`GPT2LMHeadModel` computed `CrossEntropyLoss(lm_logits.view(-1, V), lm_labels.view(-1))` with
`lm_labels = input_ids` and no shift, so "minimizing the loss would previously destroy the
language model within a few steps": under a causal mask each position sees its own label. The
fix shifts inside the head: `lm_logits[:, :-1]` against `lm_labels[:, 1:]` (the same bug came
back in `TransfoXLLMHeadModel`, transformers#3711). Reproduced as a GPT whose head takes
`lm_labels` and a script that passes `lm_labels=input_ids`, as the documentation said to.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .harness import Fault, Result, Script, Split
from .language import VOCAB, flat_cross_entropy, language, train_val

LENGTH = 24


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads, self.ln_1, self.c_attn = heads, nn.LayerNorm(d), nn.Linear(d, 3 * d)
        self.c_proj, self.ln_2 = nn.Linear(d, d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2)
                   for z in self.c_attn(self.ln_1(x)).split(d, dim=2))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln_2(x))


class GPT2LMHeadModel(nn.Module):
    def __init__(self, bug: bool, d: int = 32, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.bug = bug
        self.wte, self.wpe = nn.Embedding(VOCAB + 1, d), nn.Embedding(LENGTH, d)
        self.h = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln_f, self.lm_head = nn.LayerNorm(d), nn.Linear(d, VOCAB + 1, bias=False)

    def forward(self, input_ids: torch.Tensor, lm_labels: torch.Tensor | None = None):
        h = self.h(self.wte(input_ids) + self.wpe(torch.arange(input_ids.shape[1])))
        lm_logits = self.lm_head(self.ln_f(h))
        if lm_labels is None:
            return lm_logits
        if not self.bug:                 # tokens < n predict n
            lm_logits, lm_labels = lm_logits[:, :-1], lm_labels[:, 1:]
        return F.cross_entropy(lm_logits.reshape(-1, lm_logits.shape[-1]), lm_labels.reshape(-1))


def step(s: Script, loss_fn, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s.optimizer.zero_grad()
    loss = s.model(x, lm_labels=y)
    loss.backward()
    s.optimizer.step()
    return loss


def evaluate(s: Script, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s.model.eval()
    with torch.no_grad():
        loss = s.model(x, lm_labels=y)
    s.model.train()
    return loss


def build(bug: bool, seed: int) -> Script:
    _, train, val = train_val(seed, LENGTH)
    model = GPT2LMHeadModel(bug)
    return Script(model, Split(train, train, val, val), flat_cross_entropy,
                  torch.optim.Adam(model.parameters(), lr=3e-3), steps=200, batch=32,
                  step=step, evaluate=evaluate, eval_every=40)


FLOOR = language(0).floor(torch.arange(1, LENGTH))


def repeats(r: Result) -> bool:
    """The script's loss falls far below what the text allows (the model copies its input)."""
    return any(v < FLOOR - 0.15 for v in r.val_losses)


FAULT = Fault("LM head loss without the shift: logits at t against the label at t",
              "huggingface/transformers PR #404; transformers#3711", "sequence",
              ("TARGETS_NOT_SHIFTED",),
              "the loss goes to zero within a few steps and the language model is destroyed",
              repeats, build)
