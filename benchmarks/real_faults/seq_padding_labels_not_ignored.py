"""Supervised fine-tuning on right-padded batches with `labels = input_ids`: the padding is
never set to -100, so the loss counts it.

01-ai/Yi#110 ("No ignore index for pad tokens"): "If the labels corresponding to pad tokens are
not set to ignore index, how to avoid calculating loss for pad tokens?"; a maintainer: "I
don't see the `YiForCausalLM` ignoring the loss from padding tokens". The same bug, and its
effect, in open-jarvis/OpenJarvis PR #521: `model(input_ids=..., attention_mask=...,
labels=input_ids)` with `padding="max_length"`, so most loss terms were "predict padding at a
padded position", which "dilutes the gradient signal on real content and makes the reported
loss misleadingly low". (allenai/open-instruct#632 asked the same; its collator pads labels
with -100.) The fix: `labels[attention_mask == 0] = -100`. Reproduced with a LLaMA-style
decoder (RMSNorm, SwiGLU, rotary positions, `scaled_dot_product_attention` under a causal and
padding mask) called as the Hugging Face models are; pad id 0.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .harness import Fault, Result, Script, Split
from .language import PAD, VOCAB, CausalLMOutput, flat_cross_entropy, train_val

LENGTH, SHORTEST = 24, 6


def rotary(x: torch.Tensor) -> torch.Tensor:
    """Rotate (B, H, T, D) queries or keys by position (the two halves of D as pairs)."""
    t, d = x.shape[-2], x.shape[-1]
    angle = torch.arange(t)[:, None] / 10000 ** (torch.arange(0, d, 2) / d)[None, :]
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    half = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos + half * sin


class RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False)
                                                              for _ in range(4))
        self.gate_proj, self.up_proj = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False)
        self.down_proj = nn.Linear(2 * d, d, bias=False)
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(d), RMSNorm(d)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        x = self.input_layernorm(h)
        q, k, v = (p(x).view(b, t, self.heads, -1).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        a = F.scaled_dot_product_attention(rotary(q), rotary(k), v, attn_mask=mask)
        h = h + self.o_proj(a.transpose(1, 2).reshape(b, t, d))
        x = self.post_attention_layernorm(h)
        return h + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaForCausalLM(nn.Module):
    def __init__(self, d: int = 32, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB + 1, d)
        self.layers = nn.ModuleList(LlamaDecoderLayer(d, heads) for _ in range(layers))
        self.norm, self.lm_head = RMSNorm(d), nn.Linear(d, VOCAB + 1, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> CausalLMOutput:
        t = input_ids.shape[1]
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        visible = torch.ones(t, t, dtype=torch.bool).tril()[None, None] \
            & attention_mask.bool()[:, None, None, :]              # True = may attend
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, visible)
        logits = self.lm_head(self.norm(h))
        loss = None if labels is None else flat_cross_entropy(logits[:, :-1], labels[:, 1:])
        return CausalLMOutput(loss, logits)                         # ignore_index: -100


def labels_for(tokens: torch.Tensor, bug: bool) -> torch.Tensor:
    labels = tokens.clone()
    if not bug:
        labels[tokens == PAD] = -100
    return labels


def step(s: Script, loss_fn, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s.optimizer.zero_grad()
    loss = s.model(input_ids=x, attention_mask=(x != PAD).long(), labels=y).loss
    loss.backward()
    s.optimizer.step()
    return loss


def evaluate(s: Script, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s.model.eval()
    with torch.no_grad():
        loss = s.model(input_ids=x, attention_mask=(x != PAD).long(), labels=y).loss
    s.model.train()
    return loss


def build(bug: bool, seed: int) -> Script:
    _, train, val = train_val(seed, LENGTH, SHORTEST, PAD)
    model = LlamaForCausalLM()
    return Script(model, Split(train, labels_for(train, bug), val, labels_for(val, bug)),
                  flat_cross_entropy, torch.optim.AdamW(model.parameters(), lr=3e-3),
                  steps=200, batch=32, step=step, evaluate=evaluate, eval_every=40,
                  predict=lambda x: model(input_ids=x, attention_mask=(x != PAD).long()).logits)


def text_loss(r: Result) -> float:
    """The trained model's validation loss over the text targets alone."""
    x = r.script.data.x_val
    r.script.model.eval()
    with torch.no_grad():
        logits = r.script.model(input_ids=x, attention_mask=(x != PAD).long()).logits
    r.script.model.train()
    targets = x[:, 1:].masked_fill(x[:, 1:] == PAD, -100)
    return float(flat_cross_entropy(logits[:, :-1], targets))


def misleadingly_low(r: Result) -> bool:
    """The loss the script reports is well below the model's loss on the text: it averages in
    the padding, which is trivial to predict."""
    return r.val_losses[-1] < 0.8 * text_loss(r)


FAULT = Fault("padded labels not set to -100 in supervised fine-tuning",
              "01-ai/Yi#110; open-jarvis/OpenJarvis PR #521", "sequence", ("PADDING_IN_LOSS",),
              "a misleadingly low loss: most terms predict padding at padded positions",
              misleadingly_low, build)
