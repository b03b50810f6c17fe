"""Gradient accumulation over micro-batches of different lengths, each loss a mean.

Accumulating gradients over micro-batches is meant to give the gradient of one big batch: the
mean loss over all the step's tokens. Dividing each micro-batch's *mean* loss by the number of
micro-batches gives that only when every micro-batch holds as many tokens. Here the batch is
sorted by length before it is cut (to save padding, as length bucketing does), so one
micro-batch holds titles of 3 tokens and the other verses of 16: a token of a title weighs
seven times a token of a verse, in the gradient and in the logged loss. A verse says 8 tokens
and then repeats them, so titles are all new tokens (hard) and verses half repetition (easy): the mean of the micro-batches' means sits well above the mean over the
step's tokens, and the logged training loss stops matching the held-out loss of the same
model, though the data are endless and nothing can overfit. Sum the token losses and divide
by the step's number of target tokens.
"""
from __future__ import annotations

import statistics

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, at_most, difference
from broken_models.tokens import markov_source, next_token_loss

TITLE = "Per-micro-batch mean losses under gradient accumulation with varied lengths"
SYMPTOM = ("The logged training loss ends 0.2-0.3 nats above the held-out loss of the same "
           "model on the same kind of lines (endless synthetic data: nothing to overfit), and "
           "its held-out loss ends 0.06-0.27 nats above that of the same run weighted per "
           "token.")
EXPECTED = ("ACCUMULATION_UNWEIGHTED_MEAN",)
CAUSES = ("ACCUMULATION_UNWEIGHTED_MEAN",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Sequence models and language models"
FIX = ("Sum the token losses of the step's micro-batches (reduction='sum') and divide by the "
       "step's number of target tokens, counted before the micro-batch loop.")
EVIDENCE = ("Put the logged training loss beside the held-out loss of the same model: on endless "
            "data with nothing to overfit, why are they apart? Then read the report's first "
            "finding: how many target tokens does each micro-batch hold, and how is each one's "
            "loss weighed?")
CHANGE = ("Change how the micro-batches' losses are added up: weigh every target token of the "
          "step alike.")
TARGET = "the logged training loss within 0.06 nats of the held-out loss"
SYMPTOM_CHECK = above(difference("train_loss", "val_loss"), 0.06)
TARGET_CHECK = (at_least(difference("train_loss", "val_loss"), -0.06)
                & at_most(difference("train_loss", "val_loss"), 0.06))
REFERENCE = "the gradient-accumulation loss normalisation bug of 2024 (Hugging Face transformers)"


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, half, batch_size, micro_batches = 16, 8, 32, 2     # 2 micro-batches of 16 lines
    pad = vocab
    width, heads, layers = 32, 2, 2
    steps, lr = 200, 1e-2

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab, successors=10)
    g = torch.Generator().manual_seed(seed)

    def lines(n: int) -> torch.Tensor:
        """Half titles (3 tokens), half verses (`half` tokens said twice), padded."""
        first = source.sample(n, half, g)
        rows = torch.cat([first, first], dim=1)
        verse = torch.rand(n, generator=g) < 0.5
        lengths = torch.where(verse, 2 * half, 3)
        return rows.masked_fill(torch.arange(2 * half) >= lengths[:, None], pad)

    train, val = lines(8192), lines(1024)

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab + 1, width)
            self.position = nn.Embedding(2 * half, width)
            block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            h = self.embed(tokens) + self.position(torch.arange(t))
            mask = nn.Transformer.generate_square_subsequent_mask(t)
            return self.head(self.blocks(h, mask=mask, is_causal=True))

    def length_buckets(rows: torch.Tensor) -> list[torch.Tensor]:
        """The batch sorted by length and cut into micro-batches (less padding each)."""
        order = (rows != pad).sum(1).argsort()
        return [rows[i] for i in order.chunk(micro_batches)]

    model = LanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss(ignore_index=pad)
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            buckets = length_buckets(train[torch.randint(len(train), (batch_size,), generator=g)])
            optimizer.zero_grad()
            step_loss = 0.0
            for rows in buckets:
                logits = model(rows[:, :-1])
                loss = criterion(logits.reshape(-1, vocab), rows[:, 1:].reshape(-1))
                loss = loss / micro_batches
                loss.backward()
                step_loss += loss.item()
            optimizer.step()
            schedule.step()
            debugger.record_loss(step_loss)
    model.eval()
    metrics = {"losses": debugger.loss_history, "final_loss": debugger.loss_history[-1],
               "train_loss": statistics.mean(debugger.loss_history[-50:]),
               "val_loss": next_token_loss(model, val, pad)}
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, half, batch_size, micro_batches = 16, 8, 32, 2     # 2 micro-batches of 16 lines
    pad = vocab
    width, heads, layers = 32, 2, 2
    steps, lr = 200, 1e-2

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab, successors=10)
    g = torch.Generator().manual_seed(seed)

    def lines(n: int) -> torch.Tensor:
        """Half titles (3 tokens), half verses (`half` tokens said twice), padded."""
        first = source.sample(n, half, g)
        rows = torch.cat([first, first], dim=1)
        verse = torch.rand(n, generator=g) < 0.5
        lengths = torch.where(verse, 2 * half, 3)
        return rows.masked_fill(torch.arange(2 * half) >= lengths[:, None], pad)

    train, val = lines(8192), lines(1024)

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab + 1, width)
            self.position = nn.Embedding(2 * half, width)
            block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            h = self.embed(tokens) + self.position(torch.arange(t))
            mask = nn.Transformer.generate_square_subsequent_mask(t)
            return self.head(self.blocks(h, mask=mask, is_causal=True))

    def length_buckets(rows: torch.Tensor) -> list[torch.Tensor]:
        """The batch sorted by length and cut into micro-batches (less padding each)."""
        order = (rows != pad).sum(1).argsort()
        return [rows[i] for i in order.chunk(micro_batches)]

    model = LanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss(ignore_index=pad, reduction="sum")
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            buckets = length_buckets(train[torch.randint(len(train), (batch_size,), generator=g)])
            tokens = sum((rows[:, 1:] != pad).sum() for rows in buckets)
            optimizer.zero_grad()
            step_loss = 0.0
            for rows in buckets:
                logits = model(rows[:, :-1])
                loss = criterion(logits.reshape(-1, vocab), rows[:, 1:].reshape(-1))
                loss = loss / tokens
                loss.backward()
                step_loss += loss.item()
            optimizer.step()
            schedule.step()
            debugger.record_loss(step_loss)
    model.eval()
    metrics = {"losses": debugger.loss_history, "final_loss": debugger.loss_history[-1],
               "train_loss": statistics.mean(debugger.loss_history[-50:]),
               "val_loss": next_token_loss(model, val, pad)}
    return Outcome(metrics, debugger)
