"""Batched generation from right-padded prompts: the model is fed its own padding.

Prompts of different lengths must be padded to stack into one batch. A causal language model
generates at the end of its input, so right padding puts the pads *between* a short prompt
and the tokens generated after it. In training the padding sat at the ends of the rows, after
every real token, and out of the loss: the model never predicted a word with a pad in its
context. At generation it has to, and the positions are off by the number of pads too. Here
the text repeats itself (a line of 8 tokens, then the same 8 again), so the continuation of a
prompt is known: the model gets it right almost always when the true prefix is fed to it
(teacher forcing), and much less often when it generates from a padded prompt. Generate each
prompt from its real tokens only: group the prompts by length (or pad on the left and pass
the padding mask and the positions).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from broken_models.case import Outcome
from broken_models.checks import at_least, below, difference
from broken_models.tokens import markov_source

TITLE = "Batched generation from right-padded prompts"
SYMPTOM = ("Teacher-forced accuracy on the repeated half is near 1.0, yet greedy continuations "
           "of held-out prompts, completed in one batch, are right for only a quarter to a third "
           "of their tokens.")
EXPECTED = ("GENERATION_ON_PADDING",)
CAUSES = ("GENERATION_ON_PADDING",)
CONSEQUENCES = ()
TOOL = "monitor"
LESSON = "Sequence models and language models"
FIX = ("Generate each prompt from its real tokens: group the prompts by length and complete "
       "each group unpadded (or left-pad with a padding mask and positions counted from the "
       "first real token).")
EVIDENCE = ("Put the teacher-forced accuracy beside the generated accuracy on the same prompts. "
            "Then print one short prompt as the sampler stacks it: what sits between its last "
            "real token and the first generated one?")
CHANGE = ("Change how the prompts are batched for generation, so that the model is fed only "
          "real tokens.")
TARGET = "teacher-forced and generated accuracy both >= 0.95"
SYMPTOM_CHECK = below(difference("generated_accuracy", "teacher_forced_accuracy"), -0.2)
TARGET_CHECK = at_least("teacher_forced_accuracy", 0.95) & at_least("generated_accuracy", 0.95)
REFERENCE = "Hugging Face's warning: right-padding detected in a decoder-only model's generate()"


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, half, batch_size = 16, 8, 32          # a line is `half` tokens, then them again
    pad = vocab
    width, heads, layers = 32, 2, 2
    steps, lr, new_tokens = 450, 1e-2, 4

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab)
    g = torch.Generator().manual_seed(seed)

    def lines(n: int, shortest: int) -> torch.Tensor:
        first = source.sample(n, half, g)
        rows = torch.cat([first, first], dim=1)
        lengths = torch.randint(shortest, 2 * half + 1, (n,), generator=g)
        return rows.masked_fill(torch.arange(2 * half) >= lengths[:, None], pad)

    train, val = lines(4096, half + 2), lines(512, 2 * half)

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

    @torch.no_grad()
    def complete(prompts: torch.Tensor) -> torch.Tensor:
        out = prompts
        for _ in range(new_tokens):
            out = torch.cat([out, model(out)[:, -1].argmax(-1, keepdim=True)], dim=1)
        return out[:, prompts.shape[1]:]

    model = LanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss(ignore_index=pad)
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
        model.eval()
        cut = torch.randint(half, 2 * half - new_tokens + 1, (len(val),), generator=g)
        prompts = [row[:k] for row, k in zip(val, cut)]
        expected = torch.stack([row[k:k + new_tokens] for row, k in zip(val, cut)])
        generated = complete(pad_sequence(prompts, batch_first=True, padding_value=pad))
    with torch.no_grad():
        predicted = model(val[:, :-1]).argmax(-1)[:, half - 1:]
    metrics = {"losses": debugger.loss_history, "final_loss": debugger.loss_history[-1],
               "teacher_forced_accuracy": (predicted == val[:, half:]).float().mean().item(),
               "generated_accuracy": (generated == expected).float().mean().item()}
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger

    vocab, half, batch_size = 16, 8, 32          # a line is `half` tokens, then them again
    pad = vocab
    width, heads, layers = 32, 2, 2
    steps, lr, new_tokens = 450, 1e-2, 4

    torch.manual_seed(seed)
    source = markov_source(seed, vocab=vocab)
    g = torch.Generator().manual_seed(seed)

    def lines(n: int, shortest: int) -> torch.Tensor:
        first = source.sample(n, half, g)
        rows = torch.cat([first, first], dim=1)
        lengths = torch.randint(shortest, 2 * half + 1, (n,), generator=g)
        return rows.masked_fill(torch.arange(2 * half) >= lengths[:, None], pad)

    train, val = lines(4096, half + 2), lines(512, 2 * half)

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

    @torch.no_grad()
    def complete(prompts: torch.Tensor) -> torch.Tensor:
        out = prompts
        for _ in range(new_tokens):
            out = torch.cat([out, model(out)[:, -1].argmax(-1, keepdim=True)], dim=1)
        return out[:, prompts.shape[1]:]

    model = LanguageModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss(ignore_index=pad)
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
        model.eval()
        cut = torch.randint(half, 2 * half - new_tokens + 1, (len(val),), generator=g)
        prompts = [row[:k] for row, k in zip(val, cut)]
        expected = torch.stack([row[k:k + new_tokens] for row, k in zip(val, cut)])
        generated = torch.empty_like(expected)
        for k in cut.unique():                    # one batch per prompt length
            same = (cut == k).nonzero()[:, 0]
            generated[same] = complete(torch.stack([prompts[i] for i in same]))
    with torch.no_grad():
        predicted = model(val[:, :-1]).argmax(-1)[:, half - 1:]
    metrics = {"losses": debugger.loss_history, "final_loss": debugger.loss_history[-1],
               "teacher_forced_accuracy": (predicted == val[:, half:]).float().mean().item(),
               "generated_accuracy": (generated == expected).float().mean().item()}
    return Outcome(metrics, debugger)
