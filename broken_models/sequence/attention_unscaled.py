"""Hand-written attention whose scores are not divided by sqrt(d).

Scaled dot-product attention divides the scores q.k by sqrt(d) for a reason: the dot product
of two d-dimensional vectors of unit-variance entries has variance d. Here d = 64 and the
queries and keys come out of Glorot-initialised projections of layer-normalised inputs, so
the raw scores have a standard deviation of about 8: softmax turns each row into nearly a
one-hot vector from the very first step. A saturated softmax passes almost no gradient, so the
attention pattern cannot learn to move. The task needs the opposite of one-hot (the label
counts words over the whole review, so the summary token must average over all of them);
stuck on one word per review, the classifier guesses the sentiment of one word and the loss
hardly moves from ln 2. Divide the scores by sqrt(d) (F.scaled_dot_product_attention does).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import scores
from broken_models.tokens import reviews

TITLE = "Attention scores not scaled by 1/sqrt(d)"
SYMPTOM = ("After 300 steps the training loss is still 0.6-0.7 (ln 2 = 0.69 is chance) and "
           "validation accuracy 0.5-0.65, on a counting task a model of this size learns to "
           "over 0.95.")
EXPECTED = ("ATTENTION_SATURATED",)
CAUSES = ("ATTENTION_SATURATED",)
CONSEQUENCES = ("VANISHING_GRADIENT", "LR_TOO_LOW", "COLLAPSED_ACTIVATIONS")
TOOL = "monitor"
LESSON = "Sequence models and language models"
FIX = "Divide the attention scores by math.sqrt(d_model), the dimension of the queries and keys."
EVIDENCE = ("Read the report's first finding: how spread out are the attention rows (their "
            "entropy) from the very first step? Then compare the spread of the raw scores with "
            "the scale a softmax can still pass gradient through.")
CHANGE = ("Change the attention scores' scale, before the softmax, as scaled dot-product "
          "attention does.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.8)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, padded_length = 24, 24
    pad, cls = vocab, vocab + 1
    d_model = 64
    steps, batch_size, lr = 300, 64, 3e-3

    torch.manual_seed(seed)
    data = reviews(seed, vocab=vocab, width=padded_length)
    g = torch.Generator().manual_seed(seed)

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query = nn.Linear(d_model, d_model)
            self.key = nn.Linear(d_model, d_model)
            self.value = nn.Linear(d_model, d_model)

        def forward(self, h: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
            scores = self.query(h) @ self.key(h).transpose(1, 2)
            scores = scores.masked_fill(padding[:, None, :], float("-inf"))
            return torch.softmax(scores, dim=-1) @ self.value(h)

    class ReviewClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab + 2, d_model)
            self.position = nn.Embedding(64, d_model)
            self.norm = nn.LayerNorm(d_model)
            self.attention = SelfAttention()
            self.head = nn.Linear(d_model, 2)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            tokens = torch.cat([torch.full((len(tokens), 1), cls), tokens], dim=1)
            h = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
            h = h + self.attention(self.norm(h), tokens == pad)
            return self.head(h[:, 0])

    model = ReviewClassifier()
    for p in model.parameters():              # Glorot initialisation for every matrix
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            i = torch.randint(len(data.x_train), (batch_size,), generator=g)
            loss = criterion(model(data.x_train[i]), data.y_train[i])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.detach())
    model.eval()
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, padded_length = 24, 24
    pad, cls = vocab, vocab + 1
    d_model = 64
    steps, batch_size, lr = 300, 64, 3e-3

    torch.manual_seed(seed)
    data = reviews(seed, vocab=vocab, width=padded_length)
    g = torch.Generator().manual_seed(seed)

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query = nn.Linear(d_model, d_model)
            self.key = nn.Linear(d_model, d_model)
            self.value = nn.Linear(d_model, d_model)

        def forward(self, h: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
            scores = self.query(h) @ self.key(h).transpose(1, 2) / math.sqrt(d_model)
            scores = scores.masked_fill(padding[:, None, :], float("-inf"))
            return torch.softmax(scores, dim=-1) @ self.value(h)

    class ReviewClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab + 2, d_model)
            self.position = nn.Embedding(64, d_model)
            self.norm = nn.LayerNorm(d_model)
            self.attention = SelfAttention()
            self.head = nn.Linear(d_model, 2)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            tokens = torch.cat([torch.full((len(tokens), 1), cls), tokens], dim=1)
            h = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
            h = h + self.attention(self.norm(h), tokens == pad)
            return self.head(h[:, 0])

    model = ReviewClassifier()
    for p in model.parameters():              # Glorot initialisation for every matrix
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            i = torch.randint(len(data.x_train), (batch_size,), generator=g)
            loss = criterion(model(data.x_train[i]), data.y_train[i])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.detach())
    model.eval()
    return Outcome(scores(model, data, debugger.loss_history), debugger)
