"""An output layer meant to share the embedding's weights that gets a copy of them instead:
two tensors, trained apart.

dhansmair/flamingo-mini#4 ("use weight tying when copying lm_head from the language model"):
"usually LMs use tied weights between the token embedding matrix and the linear output layer
`lm_head`. Right now, the flamingo simply copies the weights", so the copy is a second
parameter that training moves on its own. (mosaicml/examples PR #11 found a GPT whose
`lm_head.weight - wte.weight` was not 0 for the same reason.) The fix assigns the parameter,
`lm_head.weight = wte.weight`. Reproduced with a small GPT whose head is built from the
embedding's values.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .harness import Fault, Result, Script
from .language import VOCAB, flat_cross_entropy, next_token_split

LENGTH = 25


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads, self.ln1, self.qkv = heads, nn.LayerNorm(d), nn.Linear(d, 3 * d)
        self.proj, self.ln2 = nn.Linear(d, d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(d, -1))
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True)
                          .transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class LanguageModel(nn.Module):
    def __init__(self, bug: bool, d: int = 32, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB + 1, d), nn.Embedding(LENGTH, d)
        nn.init.normal_(self.wte.weight, std=0.1)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, VOCAB + 1, bias=False)
        if bug:
            self.lm_head.weight.data.copy_(self.wte.weight.data)    # the values, not the tensor
        else:
            self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        return self.lm_head(self.ln_f(self.blocks(x)))


def build(bug: bool, seed: int) -> Script:
    data, _ = next_token_split(seed, LENGTH)
    model = LanguageModel(bug)
    # 400 steps: in 150 the tied model was still on the plateau at the targets' unigram entropy
    # (2.3-2.4 nats against a floor of 0.77) on seeds 11 and 13, which read as a stall
    # (WARMUP_MISSING); after 400 its training loss ends at 0.79-0.88 on seeds 0-19
    return Script(model, data, flat_cross_entropy, torch.optim.AdamW(model.parameters(), lr=1e-2),
                  steps=400, batch=32, eval_every=100)


def apart(r: Result) -> bool:
    """The head and the embedding, meant to be one tensor, differ after training."""
    m = r.script.model
    return not torch.equal(m.lm_head.weight, m.wte.weight)


FAULT = Fault("lm_head built as a copy of the embedding instead of tied to it",
              "dhansmair/flamingo-mini#4; mosaicml/examples PR #11", "sequence",
              ("UNTIED_WEIGHTS",),
              "lm_head.weight - wte.weight is not 0: two tensors trained apart",
              apart, build, blame="lm_head")
