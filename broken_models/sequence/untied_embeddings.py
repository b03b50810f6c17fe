"""An output head meant to share the embedding's table, given a copy of it instead.

Language models usually tie the output head to the input embedding: one (vocab, width) matrix
maps tokens to vectors on the way in and vectors to token scores on the way out. It saves the
largest matrix of a small model, and whatever the embedding learns about a token the head
knows too. Tying means *sharing one Parameter* (`head.weight = embed.weight`). Copying the
table into both (`.data.copy_`) gives two parameters that merely start equal: the optimizer
trains them apart, the model holds the table twice, and nothing else looks wrong: the loss
falls as it should. The symptom is in the model itself: the parameter count is larger than
the tied design's, and after training the head and the embedding are two different matrices.
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, at_most, difference
from broken_models.tokens import lm_scores, markov_source

TITLE = "An embedding and an output head meant to be tied, copied instead"
SYMPTOM = ("The model reports vocab x width = 512 more parameters than the tied design, and "
           "after training its output head and input embedding, set from one table, differ by "
           "half their norm or more.")
EXPECTED = ("UNTIED_WEIGHTS",)
CAUSES = ("UNTIED_WEIGHTS",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Sequence models and language models"
FIX = ("Share the Parameter instead of copying values: self.head.weight = self.embed.weight "
       "(after setting the table, before the optimizer is built).")
EVIDENCE = ("Count the model's parameters, and read metrics['head_embedding_difference'] after "
            "training: are the head and the embedding one table? Then read the report's first "
            "finding: which two parameters started equal, and what happened to them?")
CHANGE = ("Change how the head gets the embedding's table: one parameter shared, not two filled "
          "alike.")
TARGET = ("held-out loss within 0.08 nats above the floor of those tokens, with one shared "
          "table (no difference between head and embedding)")
SYMPTOM_CHECK = above("head_embedding_difference", 0.01)
TARGET_CHECK = (at_least(difference("val_loss", "val_floor"), -0.03)
                & at_most(difference("val_loss", "val_floor"), 0.08)
                & at_most("head_embedding_difference", 0.0))
REFERENCE = "Press and Wolf (2017), Using the Output Embedding to Improve Language Models"


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, context, batch_size = 16, 16, 32
    width, heads, layers = 32, 2, 2
    steps, lr = 300, 1e-2

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab)
    g = torch.Generator().manual_seed(seed)
    train, val = source.sample(4096, context + 1, g), source.sample(256, context + 1, g)

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.position = nn.Embedding(context, width)
            block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)
            table = torch.randn(vocab, width) / width ** 0.5   # one table, in and out
            self.embed.weight.data.copy_(table)
            self.head.weight.data.copy_(table)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            h = self.embed(tokens) + self.position(torch.arange(t))
            mask = nn.Transformer.generate_square_subsequent_mask(t)
            return self.head(self.norm(self.blocks(h, mask=mask, is_causal=True)))

    model = LanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            rows = train[torch.randint(len(train), (batch_size,), generator=g)]
            logits = model(rows[:, :-1])
            loss = criterion(logits.reshape(-1, vocab), rows[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            debugger.record_loss(loss.detach())
    metrics = lm_scores(model, source, val, debugger.loss_history)
    metrics["parameters"] = sum(p.numel() for p in model.parameters())
    difference = (model.head.weight - model.embed.weight).norm() / model.embed.weight.norm()
    metrics["head_embedding_difference"] = difference.item()
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, context, batch_size = 16, 16, 32
    width, heads, layers = 32, 2, 2
    steps, lr = 300, 1e-2

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab)
    g = torch.Generator().manual_seed(seed)
    train, val = source.sample(4096, context + 1, g), source.sample(256, context + 1, g)

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.position = nn.Embedding(context, width)
            block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)
            table = torch.randn(vocab, width) / width ** 0.5   # one table, in and out
            self.embed.weight.data.copy_(table)
            self.head.weight = self.embed.weight

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            h = self.embed(tokens) + self.position(torch.arange(t))
            mask = nn.Transformer.generate_square_subsequent_mask(t)
            return self.head(self.norm(self.blocks(h, mask=mask, is_causal=True)))

    model = LanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            rows = train[torch.randint(len(train), (batch_size,), generator=g)]
            logits = model(rows[:, :-1])
            loss = criterion(logits.reshape(-1, vocab), rows[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            debugger.record_loss(loss.detach())
    metrics = lm_scores(model, source, val, debugger.loss_history)
    metrics["parameters"] = sum(p.numel() for p in model.parameters())
    difference = (model.head.weight - model.embed.weight).norm() / model.embed.weight.norm()
    metrics["head_embedding_difference"] = difference.item()
    return Outcome(metrics, debugger)
