"""Padding counted in the loss of a language model.

Sentences of different lengths are padded to one length to make a batch, and the padding id
stays in the targets. Without `ignore_index`, the loss averages over the pads too, and a pad is
the easiest token there is to predict: after a pad comes a pad. The training loss looks
excellent, below the entropy floor of the real text, because a third of what it averages is
free. The real tokens pay for it: the model is also taught to predict where a sentence ends,
which it cannot know, so at every real position it keeps some probability for "pad next", and
its held-out loss on the real tokens stays above what the same model reaches when the pads
are left out of the loss (a tenth of a nat here, computed exactly from the lengths' hazard).
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import at_least, at_most, below, difference
from broken_models.tokens import lm_scores, markov_source

TITLE = "Padding counted in the loss"
SYMPTOM = ("The training loss ends near 0.75 nats, well below the data's entropy floor (about "
           "1 nat, metrics['floor']), yet on the real tokens of held-out sentences the loss is "
           "0.1-0.2 nats above that floor.")
EXPECTED = ("PADDING_IN_LOSS",)
CAUSES = ("PADDING_IN_LOSS",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Sequence models and language models"
FIX = "Leave the padding out of the loss: nn.CrossEntropyLoss(ignore_index=pad)."
EVIDENCE = ("Put the training loss beside metrics['floor'] and the held-out loss on real tokens "
            "beside metrics['val_floor']: one is below what the data allows, the other above it. "
            "Then read the report's first finding: which target id does the loss count, and how "
            "many of them are there?")
CHANGE = ("Change the loss so that it leaves out the targets that are not text.")
TARGET = "held-out loss on the real tokens within 0.07 nats above the floor of those tokens"
SYMPTOM_CHECK = below(difference("train_loss", "floor"), -0.15)
TARGET_CHECK = (at_least(difference("val_loss", "val_floor"), -0.03)
                & at_most(difference("val_loss", "val_floor"), 0.07))
REFERENCE = "EleutherAI/gpt-neo#45, allenai/open-instruct#632 (padding tokens in the loss)"


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, context, batch_size = 16, 16, 32
    pad = vocab                                  # one more id, after the words
    width, heads, layers = 32, 2, 2
    steps, lr = 300, 3e-3

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab)
    g = torch.Generator().manual_seed(seed)

    def sentences(n: int) -> torch.Tensor:
        """n sentences of 2 to context + 1 tokens, padded to context + 1."""
        rows = source.sample(n, context + 1, g)
        lengths = torch.randint(2, context + 2, (n,), generator=g)
        return rows.masked_fill(torch.arange(context + 1) >= lengths[:, None], pad)

    train, val = sentences(4096), sentences(512)

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab + 1, width)
            self.position = nn.Embedding(context, width)
            block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.head = nn.Linear(width, vocab + 1)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            h = self.embed(tokens) + self.position(torch.arange(t))
            mask = nn.Transformer.generate_square_subsequent_mask(t)
            return self.head(self.blocks(h, mask=mask, is_causal=True))

    model = LanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            rows = train[torch.randint(len(train), (batch_size,), generator=g)]
            logits = model(rows[:, :-1])
            loss = criterion(logits.reshape(-1, vocab + 1), rows[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            debugger.record_loss(loss.detach())
    return Outcome(lm_scores(model, source, val, debugger.loss_history, pad=pad), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, context, batch_size = 16, 16, 32
    pad = vocab                                  # one more id, after the words
    width, heads, layers = 32, 2, 2
    steps, lr = 300, 3e-3

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab)
    g = torch.Generator().manual_seed(seed)

    def sentences(n: int) -> torch.Tensor:
        """n sentences of 2 to context + 1 tokens, padded to context + 1."""
        rows = source.sample(n, context + 1, g)
        lengths = torch.randint(2, context + 2, (n,), generator=g)
        return rows.masked_fill(torch.arange(context + 1) >= lengths[:, None], pad)

    train, val = sentences(4096), sentences(512)

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab + 1, width)
            self.position = nn.Embedding(context, width)
            block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.head = nn.Linear(width, vocab + 1)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            h = self.embed(tokens) + self.position(torch.arange(t))
            mask = nn.Transformer.generate_square_subsequent_mask(t)
            return self.head(self.blocks(h, mask=mask, is_causal=True))

    model = LanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss(ignore_index=pad)
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            rows = train[torch.randint(len(train), (batch_size,), generator=g)]
            logits = model(rows[:, :-1])
            loss = criterion(logits.reshape(-1, vocab + 1), rows[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            debugger.record_loss(loss.detach())
    return Outcome(lm_scores(model, source, val, debugger.loss_history, pad=pad), debugger)
