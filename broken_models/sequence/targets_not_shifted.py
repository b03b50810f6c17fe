"""Next-token targets that are the inputs themselves, not shifted by one.

Hugging Face's data collators hand a causal language model `labels` equal to `input_ids`, and
the model shifts them inside its loss: the logits at position t are compared with the label at
t+1. A model written by hand and fed such a batch has to do that shift itself. Without it the
logits at position t are scored against token t, which the causal mask lets position t see:
the model only has to copy its input. The loss drops to almost nothing within a few dozen steps,
far below the entropy floor of the data (about 1 nat per token here), and nothing about next
tokens is learnt: greedy text repeats one token. Compare logits[:, :-1] with labels[:, 1:].
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, at_most, below, difference
from broken_models.tokens import lm_scores, markov_source

TITLE = "Next-token targets not shifted by one"
SYMPTOM = ("The training loss falls to about 0.01 nats, far below the data's entropy floor "
           "(about 1 nat, metrics['floor']), while the held-out loss measured on the next "
           "tokens is several nats and greedy text repeats one token.")
EXPECTED = ("TARGETS_NOT_SHIFTED",)
CAUSES = ("TARGETS_NOT_SHIFTED",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Sequence models and language models"
FIX = ("Shift in the loss: compare logits[:, :-1] with labels[:, 1:], so that position t is "
       "scored on token t+1.")
EVIDENCE = ("Read the report's first finding: what do the targets the loss is given have in "
            "common with the inputs the model is given? Print one row of each, one above the "
            "other, and compare them with what a next-token model must predict.")
CHANGE = ("Change how the logits and the labels are lined up in the loss, in one place only.")
TARGET = ("held-out loss within 0.08 nats above the floor of those tokens (never below it), "
          "and under 2% impossible transitions in generated text")
SYMPTOM_CHECK = below(difference("train_loss", "floor"), -0.3) | above("generated_impossible", 0.05)
TARGET_CHECK = (at_least(difference("val_loss", "val_floor"), -0.03)
                & at_most(difference("val_loss", "val_floor"), 0.08)
                & below("generated_impossible", 0.02))
REFERENCE = "the Hugging Face convention: labels = input_ids, shifted inside the model's loss"


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, context, batch_size = 16, 16, 32
    width, heads, layers = 32, 2, 2
    steps, lr = 200, 3e-3

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab)
    g = torch.Generator().manual_seed(seed)
    train, val = source.sample(4096, context + 1, g), source.sample(256, context + 1, g)

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.position = nn.Embedding(context + 1, width)
            block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            h = self.embed(tokens) + self.position(torch.arange(t))
            mask = nn.Transformer.generate_square_subsequent_mask(t)
            return self.head(self.blocks(h, mask=mask, is_causal=True))

    def collate(rows: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"input_ids": rows, "labels": rows.clone()}

    model = LanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            batch = collate(train[torch.randint(len(train), (batch_size,), generator=g)])
            logits = model(batch["input_ids"])
            loss = criterion(logits.reshape(-1, vocab), batch["labels"].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            debugger.record_loss(loss.detach())
    return Outcome(lm_scores(model, source, val, debugger.loss_history), debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, context, batch_size = 16, 16, 32
    width, heads, layers = 32, 2, 2
    steps, lr = 200, 3e-3

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab)
    g = torch.Generator().manual_seed(seed)
    train, val = source.sample(4096, context + 1, g), source.sample(256, context + 1, g)

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.position = nn.Embedding(context + 1, width)
            block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            h = self.embed(tokens) + self.position(torch.arange(t))
            mask = nn.Transformer.generate_square_subsequent_mask(t)
            return self.head(self.blocks(h, mask=mask, is_causal=True))

    def collate(rows: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"input_ids": rows, "labels": rows.clone()}

    model = LanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            batch = collate(train[torch.randint(len(train), (batch_size,), generator=g)])
            logits = model(batch["input_ids"])
            loss = criterion(logits[:, :-1].reshape(-1, vocab),
                             batch["labels"][:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            debugger.record_loss(loss.detach())
    return Outcome(lm_scores(model, source, val, debugger.loss_history), debugger)
