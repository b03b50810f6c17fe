"""A key padding mask passed the wrong way round: True on the real tokens.

Two conventions meet in every transformer codebase. Hugging Face's `attention_mask` is 1 on
the tokens to attend to and 0 on the padding; PyTorch's `key_padding_mask` and
`src_key_padding_mask` are True on the positions to *ignore*. Build the first and pass it
where the second is expected, and attention ignores every real token and attends to the
padding only. Nothing fails: every review is padded, so every row keeps some keys, and the
loss is finite. But the summary token read by the classifier sees nothing but padding, which
carries no word of the review, and the model stays at chance however long it trains. A mask
that is True exactly where `tokens == pad` is the one PyTorch wants.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import scores
from broken_models.tokens import answers_compared, reviews

TITLE = "A key padding mask that is True on the real tokens"
SYMPTOM = ("After 300 steps the loss is still ln 2 = 0.69 and validation accuracy 0.5, on a "
           "counting task a model of this size learns to over 0.95.")
EXPECTED = ("PADDING_MASK_INVERTED",)
CAUSES = ("PADDING_MASK_INVERTED",)
CONSEQUENCES = ("ATTENTION_ON_PADDING", "NAN_OR_INF")
TOOL = "monitor"
LESSON = "Sequence models and language models"
FIX = ("Pass PyTorch's convention: src_key_padding_mask=(tokens == pad), True on the padding "
       "(an attention_mask of ones on the real tokens is the Hugging Face convention).")
EVIDENCE = ("Read the loss curve: does it ever leave chance? Then print the mask the encoder is "
            "given beside one row of tokens: is it True on the words or on the padding, and which "
            "does PyTorch's encoder expect to be True?")
CHANGE = ("Change the padding mask the encoder is given to the convention the encoder expects.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.7)
TARGET_CHECK = at_least("val_accuracy", 0.9)


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
            attention_mask = tokens != pad
            h = self.encoder(h, src_key_padding_mask=attention_mask)
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
            padding = tokens == pad
            h = self.encoder(h, src_key_padding_mask=padding)
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
