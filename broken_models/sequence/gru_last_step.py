"""A padded batch of sequences summarised by the GRU's output at the last time step.

Reviews of different lengths are padded to one length, and the GRU is run on the packed batch
so that it never reads a pad (pack_padded_sequence, the textbook way). Unpacking with
pad_packed_sequence gives back a (batch, time, hidden) tensor in which every position after a
row's last real token is a zero vector. `out[:, -1]` is the last time step of the batch, the
last real step of only the longest rows: every shorter row is summarised by zeros, whatever
it says, so the classifier gives them all one answer, the same one. Training runs and the loss
falls a little (the longest rows are still learnt), but validation accuracy sits just above
chance. (Which step is the last one depends on the longest row of the batch: a row's answer
depends on its batch-mates.) Read each row at its own last step: the final hidden state of the packed run, or
`out[torch.arange(len(out)), lengths - 1]`.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from broken_models.case import Outcome
from broken_models.checks import at_least, below
from broken_models.datasets import scores
from broken_models.tokens import reviews

TITLE = "A padded GRU batch read at out[:, -1]"
SYMPTOM = ("Validation accuracy ends near 0.55: the reviews of the longest length in a batch "
           "are classified well, and every shorter review gets the same answer.")
EXPECTED = ("PADDED_POSITION_READ",)
CAUSES = ("PADDED_POSITION_READ",)
CONSEQUENCES = ("BATCH_MIXING",)   # which step is "last" depends on the batch's longest row
TOOL = "monitor"
LESSON = "Sequence models and language models"
FIX = ("Summarise each row at its own last real step: the GRU's final hidden state of the "
       "packed batch (h_n[-1]), or out[torch.arange(len(out)), lengths - 1].")
EVIDENCE = ("Score the validation reviews by length: which lengths are right and which all get "
            "one answer? Then print, for one short review, the GRU output the head reads: which "
            "time step is it, and what is there?")
CHANGE = ("Change which time step of the GRU's output each row is summarised by: its own last "
          "real one.")
TARGET = "validation accuracy >= 0.9"
SYMPTOM_CHECK = below("val_accuracy", 0.75)
TARGET_CHECK = at_least("val_accuracy", 0.9)


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, padded_length = 24, 24
    pad = vocab
    hidden = 32
    steps, batch_size, lr = 300, 64, 1e-2

    torch.manual_seed(seed)
    data = reviews(seed, vocab=vocab, width=padded_length)
    g = torch.Generator().manual_seed(seed)

    class ReviewGRU(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab + 1, hidden, padding_idx=pad)
            self.gru = nn.GRU(hidden, hidden, batch_first=True)
            self.head = nn.Linear(hidden, 2)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            lengths = (tokens != pad).sum(dim=1)
            packed = pack_padded_sequence(self.embed(tokens), lengths, batch_first=True,
                                          enforce_sorted=False)
            out, _ = self.gru(packed)
            out, _ = pad_packed_sequence(out, batch_first=True)
            return self.head(out[:, -1])

    model = ReviewGRU()
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
    return Outcome(scores(model, data, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, padded_length = 24, 24
    pad = vocab
    hidden = 32
    steps, batch_size, lr = 300, 64, 1e-2

    torch.manual_seed(seed)
    data = reviews(seed, vocab=vocab, width=padded_length)
    g = torch.Generator().manual_seed(seed)

    class ReviewGRU(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab + 1, hidden, padding_idx=pad)
            self.gru = nn.GRU(hidden, hidden, batch_first=True)
            self.head = nn.Linear(hidden, 2)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            lengths = (tokens != pad).sum(dim=1)
            packed = pack_padded_sequence(self.embed(tokens), lengths, batch_first=True,
                                          enforce_sorted=False)
            out, _ = self.gru(packed)
            out, _ = pad_packed_sequence(out, batch_first=True)
            return self.head(out[torch.arange(len(out)), lengths - 1])

    model = ReviewGRU()
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
    return Outcome(scores(model, data, debugger.loss_history), debugger)
