"""A decoder (`is_decoder=True`) whose mask builder makes a bidirectional mask: every position
sees the tokens after it.

huggingface/transformers#48745: since v5.9.0 `RoFormerForCausalLM`, `BigBirdForCausalLM`,
`RemBertForCausalLM` and `MegatronBertForCausalLM` built their attention mask with
`create_bidirectional_mask(...)` whatever `config.is_decoder` said; trained as causal LMs on
random tokens their loss fell to almost zero in a few hundred steps. PR #48760 branches on
`is_decoder` and builds a causal mask. Reproduced small: a RoFormer-style model (rotary
positions, post-LN BERT layers, additive masks of the dtype's minimum) called as Hugging Face
models are, `model(input_ids=..., attention_mask=..., labels=input_ids)`, the labels shifted
inside the model.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .harness import Fault, Script, Split
from .language import VOCAB, CausalLMOutput, below_floor, flat_cross_entropy, language, train_val

LENGTH = 24


def rotate(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of (B, H, T, D) queries or keys (pairs of features turned by
    an angle that grows with the position)."""
    t, d = x.shape[-2], x.shape[-1]
    freq = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    angle = torch.arange(t, dtype=torch.float32)[:, None] * freq[None, :]
    cos, sin = angle.cos().repeat_interleave(2, -1), angle.sin().repeat_interleave(2, -1)
    pairs = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).reshape(x.shape)
    return x * cos + pairs * sin


class SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads, self.q, self.k, self.v = heads, nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out = nn.Linear(d, d)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        q, k, v = (f(h).view(b, t, self.heads, -1).transpose(1, 2) for f in (self.q, self.k, self.v))
        scores = rotate(q) @ rotate(k).transpose(-1, -2) / (d // self.heads) ** 0.5 + mask
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


class Layer(nn.Module):
    """A BERT layer: attention and feed-forward, each added to its input, then normalised."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.attention, self.norm1 = SelfAttention(d, heads), nn.LayerNorm(d)
        self.ff, self.norm2 = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)), \
            nn.LayerNorm(d)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(h + self.attention(h, mask))
        return self.norm2(h + self.ff(h))


def bidirectional_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, T, T) additive: the padding hidden, every other key visible."""
    hidden = attention_mask[:, None, None, :] == 0
    return torch.zeros(hidden.shape, dtype=dtype).masked_fill(hidden, torch.finfo(dtype).min) \
        .expand(-1, 1, attention_mask.shape[1], -1)


def causal_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, T, T) additive: the padding and the keys after each query hidden."""
    t = attention_mask.shape[1]
    future = torch.ones(t, t, dtype=torch.bool).triu(1)
    return bidirectional_mask(attention_mask, dtype).masked_fill(future, torch.finfo(dtype).min)


class RoFormerForCausalLM(nn.Module):
    def __init__(self, bug: bool, vocab: int, d: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.is_decoder, self.bug = True, bug
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Layer(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> CausalLMOutput:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        h = self.embed(input_ids)
        if self.is_decoder and not self.bug:
            mask = causal_mask(attention_mask, h.dtype)
        else:                                   # the bug: the decoder's flag never consulted
            mask = bidirectional_mask(attention_mask, h.dtype)
        for layer in self.layers:
            h = layer(h, mask)
        logits = self.head(h)
        loss = None
        if labels is not None:                  # labels = input_ids: shifted here
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                   labels[:, 1:].reshape(-1))
        return CausalLMOutput(loss, logits)


def step(s: Script, loss_fn, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s.optimizer.zero_grad()
    loss = s.model(input_ids=x, attention_mask=torch.ones_like(x), labels=y).loss
    loss.backward()
    s.optimizer.step()
    return loss


def evaluate(s: Script, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s.model.eval()
    with torch.no_grad():
        loss = s.model(input_ids=x, attention_mask=torch.ones_like(x), labels=y).loss
    s.model.train()
    return loss


def build(bug: bool, seed: int) -> Script:
    _, train, val = train_val(seed, LENGTH)
    model = RoFormerForCausalLM(bug, VOCAB + 1)
    return Script(model, Split(train, train, val, val), flat_cross_entropy,
                  torch.optim.AdamW(model.parameters(), lr=2e-3), steps=200, batch=32,
                  step=step, evaluate=evaluate, eval_every=40,
                  predict=lambda x: model(input_ids=x).logits)


FLOOR = language(0).floor(torch.arange(1, LENGTH))     # the same for every seed

FAULT = Fault("decoder built with a bidirectional attention mask",
              "huggingface/transformers#48745 (fixed by PR #48760)", "sequence", ("CAUSAL_LEAK",),
              "the causal-LM loss falls to almost zero: each position sees the token it predicts",
              lambda r: below_floor(r, FLOOR), build, blame="layers.0")
