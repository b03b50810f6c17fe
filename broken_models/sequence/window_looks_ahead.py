"""Local attention whose window reaches both ways: each token also sees the next ones.

Local (sliding-window) attention lets each token attend to a few neighbours only, which is
cheap on long texts. For a language model "neighbours" must mean the tokens *before* it. A
window written as `|query - key| <= w` is symmetric: it keeps the causal half and adds the w
tokens after the query, among them the token to predict. The mask is there, it is a band, it
looks deliberate, and nothing crashes; the loss simply falls far below what the data allows
(this synthetic language has an exact entropy floor of about 1 nat per token), and generated
text, which has no future to read, is made of transitions the language never makes. The test
for any causal model is to change the inputs after position t and check that no output up to
t moves: check_causality does, and names the first position that reads the future.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, at_most, below, difference
from broken_models.tokens import lm_scores, markov_source

TITLE = "A sliding-window attention mask that also looks ahead"
SYMPTOM = ("The training loss ends near 0.1 nats, a tenth of the data's entropy floor (about "
           "1 nat, metrics['floor']); greedy text from the model is full of transitions the "
           "language never makes.")
EXPECTED = ("CAUSAL_LEAK",)
CAUSES = ("CAUSAL_LEAK",)
CONSEQUENCES = ()
TOOL = "causality"
LESSON = "Sequence models and language models"
FIX = ("Make the window one-sided: a query may attend to a key only when 0 <= query - key <= "
       "window.")
EVIDENCE = ("Put the training loss beside metrics['floor'], the entropy the data allows per "
            "token. Then read `outcome.findings`: the first output position that depends on a "
            "later input, and the module where that dependence first appears. Which keys does "
            "that module's mask allow a query to see?")
CHANGE = ("Change the attention mask of that module so that it keeps only keys at or before the "
          "query, keeping the window's width.")
TARGET = ("held-out loss within 0.08 nats above the floor of those tokens (never below it), "
          "and under 2% impossible transitions in generated text")
SYMPTOM_CHECK = below(difference("train_loss", "floor"), -0.3) | above("generated_impossible", 0.05)
TARGET_CHECK = (at_least(difference("val_loss", "val_floor"), -0.03)
                & at_most(difference("val_loss", "val_floor"), 0.08)
                & below("generated_impossible", 0.02))
REFERENCE = "huggingface/transformers#31673 (label leakage through a sliding-window mask)"


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, check_causality

    vocab, context, batch_size = 16, 24, 32
    width, heads, layers = 32, 2, 2
    window = 4                                   # local attention: 4 tokens of context
    steps, lr = 200, 3e-3

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab)
    g = torch.Generator().manual_seed(seed)
    train, val = source.sample(4096, context + 1, g), source.sample(256, context + 1, g)

    class LocalAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(width, 3 * width)
            self.out = nn.Linear(width, width)

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            b, t, _ = h.shape
            q, k, v = self.qkv(h).view(b, t, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
            offset = torch.arange(t)[:, None] - torch.arange(t)[None, :]   # query - key
            allowed = offset.abs() <= window
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
            return self.out(y.transpose(1, 2).reshape(b, t, width))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attention = LocalAttention()
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            h = h + self.attention(self.norm1(h))
            return h + self.mlp(self.norm2(h))

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.position = nn.Embedding(context, width)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, vocab))

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            h = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
            return self.head(self.blocks(h))

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
    findings = check_causality(model, val[:8, :-1])
    return Outcome(lm_scores(model, source, val, debugger.loss_history), debugger, findings)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, check_causality

    vocab, context, batch_size = 16, 24, 32
    width, heads, layers = 32, 2, 2
    window = 4                                   # local attention: 4 tokens of context
    steps, lr = 200, 3e-3

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab)
    g = torch.Generator().manual_seed(seed)
    train, val = source.sample(4096, context + 1, g), source.sample(256, context + 1, g)

    class LocalAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(width, 3 * width)
            self.out = nn.Linear(width, width)

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            b, t, _ = h.shape
            q, k, v = self.qkv(h).view(b, t, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
            offset = torch.arange(t)[:, None] - torch.arange(t)[None, :]   # query - key
            allowed = (offset >= 0) & (offset <= window)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
            return self.out(y.transpose(1, 2).reshape(b, t, width))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attention = LocalAttention()
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            h = h + self.attention(self.norm1(h))
            return h + self.mlp(self.norm2(h))

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.position = nn.Embedding(context, width)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, vocab))

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            h = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
            return self.head(self.blocks(h))

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
    findings = check_causality(model, val[:8, :-1])
    return Outcome(lm_scores(model, source, val, debugger.loss_history), debugger, findings)
