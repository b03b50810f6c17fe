"""Gradient accumulation that averages each micro-batch's mean loss: with padded texts of
different lengths, the step's gradient is not the gradient of the mean over its tokens.

huggingface/transformers PR #34191 ("Fix Gradient Accumulation issue", October 2024): the
Trainer divided each micro-batch's mean token loss by the number of accumulation steps, so a
step with accumulation did not compute the loss of the same tokens in one batch: the training
loss with accumulation came out higher than without, and short sequences weighed more than
long ones. The fix passes `num_items_in_batch` (the tokens of the whole step) and sums the
token losses over it (OpenNMT/OpenNMT-py#2209 describes the same normalisation). Reproduced
with a GRU language model on right-padded texts (labels -100 at the padding), four
micro-batches a step.
"""
from __future__ import annotations

from typing import Iterator

import torch
from torch import nn
from torch.nn import functional as F

from .harness import Fault, Result, Script, Split
from .language import PAD, VOCAB, train_val

LENGTH, SHORTEST, MICRO = 25, 2, 4


class GRULanguageModel(nn.Module):
    def __init__(self, d: int = 48) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB + 1, d, padding_idx=PAD)
        self.gru = nn.GRU(d, d, batch_first=True)
        self.head = nn.Linear(d, VOCAB + 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.gru(self.embed(tokens))[0])


class AccumulatingStep:
    """The script's step: the batch in MICRO micro-batches, one backward each."""

    def __init__(self, bug: bool) -> None:
        self.bug = bug

    def terms(self, model: nn.Module, loss_fn, x: torch.Tensor, y: torch.Tensor
              ) -> Iterator[torch.Tensor]:
        """The loss of each micro-batch as it goes to backward (each forward pass when its
        turn comes, as a training loop runs them)."""
        items = (y != -100).sum()                          # num_items_in_batch
        for xs, ys in zip(x.chunk(MICRO), y.chunk(MICRO)):
            logits = model(xs).reshape(-1, VOCAB + 1)
            if self.bug:
                yield loss_fn(logits, ys.reshape(-1)) / MICRO
            else:
                yield loss_fn(logits, ys.reshape(-1), reduction="sum") / items

    def __call__(self, s: Script, loss_fn, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        s.optimizer.zero_grad()
        total = 0.0
        for loss in self.terms(s.model, loss_fn, x, y):
            loss.backward()
            total = total + loss.detach()
        s.optimizer.step()
        return total


def build(bug: bool, seed: int) -> Script:
    _, train, val = train_val(seed, LENGTH, SHORTEST, PAD)
    labels = [t[:, 1:].masked_fill(t[:, 1:] == PAD, -100) for t in (train, val)]
    model = GRULanguageModel()

    def evaluate(s: Script, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        s.model.eval()
        with torch.no_grad():
            loss = F.cross_entropy(s.model(x).reshape(-1, VOCAB + 1), y.reshape(-1))
        s.model.train()
        return loss

    return Script(model, Split(train[:, :-1], labels[0], val[:, :-1], labels[1]),
                  F.cross_entropy, torch.optim.Adam(model.parameters(), lr=5e-3), steps=120,
                  batch=32, step=AccumulatingStep(bug), evaluate=evaluate, eval_every=40)


def gradient_gap(r: Result) -> float:
    """How far the step's gradient is from the gradient of the mean loss over the step's
    tokens, on one batch of the trained model (relative)."""
    s, d = r.script, r.script.data
    x, y = d.x_train[:32], d.y_train[:32]
    params = [p for p in s.model.parameters() if p.requires_grad]
    step = torch.autograd.grad(sum(s.step.terms(s.model, F.cross_entropy, x, y)), params)
    mean = F.cross_entropy(s.model(x).reshape(-1, VOCAB + 1), y.reshape(-1))
    full = torch.autograd.grad(mean, params)
    diff = sum(float((a - b).pow(2).sum()) for a, b in zip(step, full)) ** 0.5
    return diff / sum(float(b.pow(2).sum()) for b in full) ** 0.5


FAULT = Fault("gradient accumulation averages the micro-batches' mean losses",
              "huggingface/transformers PR #34191; OpenNMT/OpenNMT-py#2209", "sequence",
              ("ACCUMULATION_UNWEIGHTED_MEAN",),
              "the step's loss and gradient differ from the same tokens taken in one batch",
              lambda r: gradient_gap(r) > 0.02, build)
