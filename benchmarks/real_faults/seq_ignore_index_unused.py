"""`ignore_index` kept on the model but never passed to the loss: the padding of every caption
is counted.

lucidrains/DALLE-pytorch#57 ("ignore_index defined but not used"): the model stored
`self.ignore_index` "to ignore the padding from the text", but its loss was
`F.cross_entropy(rearrange(logits, 'b n c -> b c n'), labels)`; "the default value of
ignore_index should be 0. Since that's the pad_id of the default tokenizer." Fixed in PR #58
("just set ignore index to 0, which is padding by convention"). Reproduced with a small
caption decoder: pre-LN blocks of `nn.MultiheadAttention` under a causal mask and no padding
mask (as DALL-E's text transformer), the loss taken over (batch, classes, positions) logits as
DALL-E's, captions right-padded with 0.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .harness import Fault, Result, Script, Split
from .language import PAD, VOCAB, train_val

LENGTH, SHORTEST = 25, 6


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(d), nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.ff(self.norm2(x))


class CaptionDecoder(nn.Module):
    def __init__(self, bug: bool, d: int = 32, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.ignore_index = PAD
        self.bug = bug
        self.text_emb, self.pos_emb = nn.Embedding(VOCAB + 1, d), nn.Embedding(LENGTH, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.to_logits = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, VOCAB + 1))

    def forward(self, text: torch.Tensor) -> torch.Tensor:
        t = text.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        x = self.text_emb(text) + self.pos_emb(torch.arange(t))
        for block in self.blocks:
            x = block(x, mask)
        return self.to_logits(x)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = logits.transpose(1, 2)                  # 'b n c -> b c n'
        if self.bug:
            return F.cross_entropy(logits, labels)
        return F.cross_entropy(logits, labels, ignore_index=self.ignore_index)


def build(bug: bool, seed: int) -> Script:
    _, train, val = train_val(seed, LENGTH, SHORTEST, PAD)
    model = CaptionDecoder(bug)
    return Script(model, Split(train[:, :-1], train[:, 1:], val[:, :-1], val[:, 1:]),
                  model.loss, torch.optim.Adam(model.parameters(), lr=3e-3), steps=200, batch=32,
                  eval_every=40)


def text_loss(r: Result) -> float:
    """The trained model's validation loss over the caption tokens alone."""
    model, d = r.script.model, r.script.data
    model.eval()
    with torch.no_grad():
        loss = F.cross_entropy(model(d.x_val).transpose(1, 2), d.y_val, ignore_index=PAD)
    model.train()
    return float(loss)


FAULT = Fault("ignore_index stored but not passed to the loss: caption padding counted",
              "lucidrains/DALLE-pytorch#57 (fixed by PR #58)", "sequence", ("PADDING_IN_LOSS",),
              "the reported loss is well below the loss on the captions themselves",
              lambda r: r.val_losses[-1] < 0.8 * text_loss(r), build)
