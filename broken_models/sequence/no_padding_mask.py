"""A transformer classifier on padded batches, given no key padding mask.

Sequences of different lengths are padded to one length so that they stack into a batch. The
padding is not text: the model must be told where it is (`src_key_padding_mask`), or attention
treats the pad tokens as words, spreading weight over them. Nothing crashes and training looks
fine, because every training review is padded to the same length and the model learns around
its pads. The trouble shows the moment the padding changes: the same validation reviews padded
to 48 tokens instead of 24 get other answers, and accuracy drops. What a review says cannot
depend on how many pads follow it. Give the encoder the padding mask (True on the pads).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, below
from broken_models.datasets import scores
from broken_models.tokens import answers_compared, reviews

TITLE = "A padded batch with no key padding mask"
SYMPTOM = ("Padded to 48 tokens instead of 24, the same validation reviews get other class "
           "probabilities (moved by a few percent on average), and some get another answer.")
EXPECTED = ("ATTENTION_ON_PADDING",)
CAUSES = ("ATTENTION_ON_PADDING",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Sequence models and language models"
FIX = ("Pass src_key_padding_mask=(tokens == pad) to the encoder, so that no position attends "
       "to the padding.")
EVIDENCE = ("Read metrics['val_answers_moved'] and metrics['val_answers_changed']: the same "
            "reviews, padded longer, get other answers. Then read the report's first finding: "
            "where does the attention put weight that no review contains?")
CHANGE = ("Change what the encoder is told about each row: which of its positions are padding.")
TARGET = ("validation accuracy >= 0.9, and the same predictions when the reviews are padded "
          "longer (class probabilities moved by under 1e-4)")
SYMPTOM_CHECK = above("val_answers_moved", 1e-3)
TARGET_CHECK = at_least("val_accuracy", 0.9) & below("val_answers_moved", 1e-4)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, padded_length = 24, 24          # words; every review is padded to this length
    pad, cls = vocab, vocab + 1            # two extra ids: padding and the summary token
    d_model, heads, layers = 32, 2, 2
    steps, batch_size, lr = 300, 64, 3e-3

    torch.manual_seed(seed)
    data = reviews(seed, vocab=vocab, width=padded_length)
    g = torch.Generator().manual_seed(seed)

    class ReviewClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab + 2, d_model)
            self.position = nn.Embedding(64, d_model)
            layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(d_model, 2)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            tokens = torch.cat([torch.full((len(tokens), 1), cls), tokens], dim=1)
            h = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
            h = self.encoder(h)
            return self.head(h[:, 0])

    model = ReviewClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss()
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            i = torch.randint(len(data.x_train), (batch_size,), generator=g)
            loss = criterion(model(data.x_train[i]), data.y_train[i])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            debugger.record_loss(loss.detach())
    model.eval()
    metrics = scores(model, data, debugger.loss_history)
    with torch.no_grad():
        longer = F.pad(data.x_val, (0, 24), value=pad)     # the same reviews, padded to 48
        compared = answers_compared(model(data.x_val), model(longer))
    metrics["val_answers_changed"], metrics["val_answers_moved"] = compared.values()
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, padded_length = 24, 24          # words; every review is padded to this length
    pad, cls = vocab, vocab + 1            # two extra ids: padding and the summary token
    d_model, heads, layers = 32, 2, 2
    steps, batch_size, lr = 300, 64, 3e-3

    torch.manual_seed(seed)
    data = reviews(seed, vocab=vocab, width=padded_length)
    g = torch.Generator().manual_seed(seed)

    class ReviewClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab + 2, d_model)
            self.position = nn.Embedding(64, d_model)
            layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(d_model, 2)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            tokens = torch.cat([torch.full((len(tokens), 1), cls), tokens], dim=1)
            h = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
            h = self.encoder(h, src_key_padding_mask=tokens == pad)
            return self.head(h[:, 0])

    model = ReviewClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss()
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            i = torch.randint(len(data.x_train), (batch_size,), generator=g)
            loss = criterion(model(data.x_train[i]), data.y_train[i])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            debugger.record_loss(loss.detach())
    model.eval()
    metrics = scores(model, data, debugger.loss_history)
    with torch.no_grad():
        longer = F.pad(data.x_val, (0, 24), value=pad)     # the same reviews, padded to 48
        compared = answers_compared(model(data.x_val), model(longer))
    metrics["val_answers_changed"], metrics["val_answers_moved"] = compared.values()
    return Outcome(metrics, debugger)
