"""A causal language model built on nn.TransformerEncoder, trained without its causal mask.

A language model predicts token t+1 from tokens 0..t. PyTorch has no decoder-only block, so
GPT-style models are often built from nn.TransformerEncoder, whose attention lets every
position see every other one unless a mask forbids it: the encoder has no notion of "before".
Without the mask, position t reads token t+1 straight from its input, the very token it is
asked to predict. The loss then falls below anything the data allows: this synthetic language
is a Markov chain whose next-token entropy is known exactly (about 1 nat per token, the
`floor` in the metrics), and the run reaches a tenth of it. No model that predicts can beat
the floor; one that reads the answer can. At generation time there is no token t+1 to read,
and the model, which never had to learn to predict, writes transitions the language never
makes. Pass the causal mask (and keep checking with check_causality that no output depends
on a later input).
"""
from __future__ import annotations

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, at_least, at_most, below, difference
from broken_models.tokens import lm_scores, markov_source

TITLE = "A causal language model trained without its causal mask"
SYMPTOM = ("The training loss ends near 0.1 nats, a tenth of the data's entropy floor (about "
           "1 nat, metrics['floor']); greedy text from the model is full of transitions the "
           "language never makes.")
EXPECTED = ("CAUSAL_LEAK",)
CAUSES = ("CAUSAL_LEAK",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Sequence models and language models"
FIX = ("Give the encoder a causal mask: mask=nn.Transformer.generate_square_subsequent_mask(T) "
       "with is_causal=True, so that position t attends to positions 0..t only.")
EVIDENCE = ("Put the training loss beside metrics['floor'], the entropy the data allows per "
            "token: can a model that predicts the next token go below it? Then read the report's "
            "first finding: which output position depends on which later input, and in which "
            "module does that first appear?")
CHANGE = ("Change the model's forward pass: tell its attention which positions each query may "
          "look at, none after its own.")
TARGET = ("held-out loss within 0.08 nats above the floor of those tokens (never below it), "
          "and under 2% impossible transitions in generated text")
SYMPTOM_CHECK = below(difference("train_loss", "floor"), -0.3) | above("generated_impossible", 0.05)
TARGET_CHECK = (at_least(difference("val_loss", "val_floor"), -0.03)
                & at_most(difference("val_loss", "val_floor"), 0.08)
                & below("generated_impossible", 0.02))
REFERENCE = "huggingface/transformers#48745 (causal-LM heads attending to future tokens)"


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
            self.position = nn.Embedding(context, width)
            block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            h = self.embed(tokens) + self.position(torch.arange(t))
            return self.head(self.blocks(h))

    model = LanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            rows = train[torch.randint(len(train), (batch_size,), generator=g)]
            inputs, targets = rows[:, :-1], rows[:, 1:]
            logits = model(inputs)
            loss = criterion(logits.reshape(-1, vocab), targets.reshape(-1))
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
            self.position = nn.Embedding(context, width)
            block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.head = nn.Linear(width, vocab)

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
            inputs, targets = rows[:, :-1], rows[:, 1:]
            logits = model(inputs)
            loss = criterion(logits.reshape(-1, vocab), targets.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            debugger.record_loss(loss.detach())
    return Outcome(lm_scores(model, source, val, debugger.loss_history), debugger)
