"""A label-attention text classifier that hands `F.scaled_dot_product_attention` the padding
mask (True at the padding) where SDPA wants True at the keys that take part: each label reads
the padding and nothing else.

InseeFrLab/torchTextClassifiers PR #92 ("fix: correct LabelAttention mask"): "Fix a bug in
LabelAttention where the attention mask was inverted when passed to
F.scaled_dot_product_attention." Its label attention gives every class a learned query that
attends over the text's token states. Reproduced small: token and position embeddings, one
learned query per class, SDPA over the tokens with the text's mask, a linear read-out per
class; texts right-padded with 0.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .harness import Fault, Script, adam, below_chance
from .language import PAD, VOCAB, labelled

LENGTH, SHORTEST, CLASSES = 24, 6, 2


class LabelAttentionClassifier(nn.Module):
    def __init__(self, bug: bool, d: int = 32) -> None:
        super().__init__()
        self.bug = bug
        self.embedding, self.pos = nn.Embedding(VOCAB + 1, d, padding_idx=PAD), nn.Embedding(LENGTH, d)
        self.label_queries = nn.Parameter(torch.randn(CLASSES, d) * 0.1)
        self.key, self.value = nn.Linear(d, d), nn.Linear(d, d)
        self.read = nn.Linear(d, 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embedding(tokens) + self.pos(torch.arange(tokens.shape[1]))
        padding = tokens == PAD                                 # True at the padding
        mask = padding if self.bug else ~padding                # SDPA: True = attend
        q = self.label_queries.expand(len(tokens), -1, -1)[:, None]      # (B, 1, C, d)
        k, v = self.key(h)[:, None], self.value(h)[:, None]              # (B, 1, T, d)
        per_label = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        return self.read(per_label[:, 0]).squeeze(-1)                    # (B, C)


def build(bug: bool, seed: int) -> Script:
    model = LabelAttentionClassifier(bug)
    return Script(model, labelled(seed, LENGTH, SHORTEST, PAD), nn.CrossEntropyLoss(),
                  adam(model, 1e-2), steps=150, batch=32)


FAULT = Fault("padding mask passed to scaled_dot_product_attention the wrong way round",
              "InseeFrLab/torchTextClassifiers PR #92", "sequence", ("PADDING_MASK_INVERTED",),
              "accuracy at chance: the label queries read only the padding",
              below_chance, build)
