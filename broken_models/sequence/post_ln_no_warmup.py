"""A post-LN transformer trained at its full learning rate from the first step.

The original transformer normalises *after* each residual sum (post-LN, still PyTorch's
default: `norm_first=False`). At initialisation its gradients are largest near the output,
and Adam's first updates, full-sized for every weight whatever its gradient, push the stack
into a state it does not leave: here the loss drops in a few steps from ln 16 = 2.77 to about
2.4, what a model that ignores its context gets (it predicts each token's frequency), and
stays there. The very same peak rate, reached over a 150-step linear warm-up, trains the model
to the data's floor. This is why the transformer recipes ramp the rate up (or use pre-LN
blocks, `norm_first=True`, which train without warm-up). Both scripts clip the gradient norm
at 1, as those recipes do too, and it does not help: Adam divides each step by the gradient's
own scale, so clipping leaves its first steps as large as they were. Nothing crashes and the
loss does fall at first, so "the learning rate is fine, the model is just weak" is the easy
mistake.
"""
from __future__ import annotations

import statistics

import torch
from torch import nn

from broken_models.case import Outcome
from broken_models.checks import above, below, difference
from broken_models.tokens import markov_source, next_token_loss

TITLE = "A post-LN transformer without learning-rate warm-up"
SYMPTOM = ("The loss drops in the first steps from 2.77 to about 2.4 and stays there for 300 "
           "steps, far above the data's floor (about 0.5 nats, metrics['floor']).")
EXPECTED = ("WARMUP_MISSING",)
CAUSES = ("WARMUP_MISSING",)
CONSEQUENCES = ("LR_TOO_HIGH", "EXPLODING_GRADIENT", "EXPLODING_ACTIVATIONS", "NAN_OR_INF",
                "DEAD_NEURONS", "COLLAPSED_ACTIVATIONS",  # the collapse of the first steps
                "VANISHING_GRADIENT")                      # a collapsed stack passes little back
TOOL = "monitor"
LESSON = "Sequence models and language models"
FIX = ("Ramp the learning rate up over the first 150 steps (a linear warm-up, then the cosine "
       "decay), keeping the same peak rate.")
EVIDENCE = ("Read the first twenty losses: where does the curve go in the first steps, and does "
            "it move after that? Put the plateau beside what a model that ignores its context "
            "gets (the entropy of the token frequencies) and beside metrics['floor']. Then read "
            "the report's findings from the top.")
CHANGE = ("Change the learning-rate schedule of the first steps, keeping the same peak rate and "
          "the same architecture.")
TARGET = "held-out loss within 0.2 nats of the floor"
SYMPTOM_CHECK = above(difference("train_loss", "floor"), 0.4)
TARGET_CHECK = below(difference("val_loss", "floor"), 0.2)
REFERENCE = "Xiong et al. (2020), On Layer Normalization in the Transformer Architecture"


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, half, batch_size = 16, 8, 32            # a line: `half` tokens, then them again
    width, heads, layers = 32, 2, 4
    steps, lr, betas = 300, 3.5e-2, (0.9, 0.98)

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab)
    g = torch.Generator().manual_seed(seed)

    def lines(n: int) -> torch.Tensor:
        first = source.sample(n, half, g)
        return torch.cat([first, first], dim=1)

    train, val = lines(4096), lines(512)
    floor = source.floor * (half - 1) / (2 * half - 1)   # the repeated half costs nothing

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.position = nn.Embedding(2 * half, width)
            block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True)
            self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            h = self.embed(tokens) + self.position(torch.arange(t))
            mask = nn.Transformer.generate_square_subsequent_mask(t)
            return self.head(self.blocks(h, mask=mask, is_causal=True))

    model = LanguageModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=betas)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            rows = train[torch.randint(len(train), (batch_size,), generator=g)]
            logits = model(rows[:, :-1])
            loss = criterion(logits.reshape(-1, vocab), rows[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            debugger.record_loss(loss.detach())
    model.eval()
    losses = debugger.loss_history
    metrics = {"losses": losses, "first_loss": losses[0], "final_loss": losses[-1],
               "train_loss": statistics.median(losses[-10:]), "floor": floor,
               "val_loss": next_token_loss(model, val)}
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, half, batch_size = 16, 8, 32            # a line: `half` tokens, then them again
    width, heads, layers = 32, 2, 4
    steps, lr, betas = 300, 3.5e-2, (0.9, 0.98)

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab)
    g = torch.Generator().manual_seed(seed)

    def lines(n: int) -> torch.Tensor:
        first = source.sample(n, half, g)
        return torch.cat([first, first], dim=1)

    train, val = lines(4096), lines(512)
    floor = source.floor * (half - 1) / (2 * half - 1)   # the repeated half costs nothing

    class LanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.position = nn.Embedding(2 * half, width)
            block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True)
            self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            h = self.embed(tokens) + self.position(torch.arange(t))
            mask = nn.Transformer.generate_square_subsequent_mask(t)
            return self.head(self.blocks(h, mask=mask, is_causal=True))

    model = LanguageModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=betas)
    schedule = torch.optim.lr_scheduler.SequentialLR(optimizer, [
        torch.optim.lr_scheduler.LinearLR(optimizer, 0.01, total_iters=150),
        torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps - 150)], [150])
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            rows = train[torch.randint(len(train), (batch_size,), generator=g)]
            logits = model(rows[:, :-1])
            loss = criterion(logits.reshape(-1, vocab), rows[:, 1:].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            debugger.record_loss(loss.detach())
    model.eval()
    losses = debugger.loss_history
    metrics = {"losses": losses, "first_loss": losses[0], "final_loss": losses[-1],
               "train_loss": statistics.median(losses[-10:]), "floor": floor,
               "val_loss": next_token_loss(model, val)}
    return Outcome(metrics, debugger)
