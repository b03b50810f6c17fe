"""The capstone: a small GPT trained on the shipped public-domain text, written the way such
programs are written (a configuration block, a character tokenizer, batches, the model, the
loop, an evaluation and a sampler), that runs, prints a loss, and is wrong.

`train_broken(seed)` is the program as handed to the student; `train_fixed(seed)` is the same
program repaired. They differ in a few places only, and `lesson.course.capstone` grades a
student's repair against them. Both return an `Outcome`: the debugger's findings and the
metrics the program's evaluation measures.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from broken_models.case import Outcome
from broken_models.tokens import corpus, next_token_loss


def train_broken(seed: int) -> Outcome:
    from lesson import NetworkDebugger, check_causality

    # -- configuration --------------------------------------------------------------------
    context, batch_size = 32, 32
    width, heads, layers = 32, 4, 2
    steps, lr, weight_decay = 300, 1e-2, 0.1
    prompts, new_tokens = ["shall i ", "love is not ", "the world ", "so long as "], 24

    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)

    # -- tokenizer and data: characters; id 0 pads a batch of prompts ----------------------
    text = corpus().lower()
    itos = ["<pad>"] + sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(itos)}
    vocab = len(itos)

    def encode(s: str) -> torch.Tensor:
        return torch.tensor([stoi[ch] for ch in s])

    def decode(ids: torch.Tensor) -> str:
        return "".join(itos[i] for i in ids.tolist() if i != 0)

    data = encode(text)
    train_data, val_data = data[:int(0.9 * len(data))], data[int(0.9 * len(data)):]

    def get_batch(source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(len(source) - context - 1, (batch_size,), generator=g)
        x = torch.stack([source[s:s + context] for s in starts])
        y = torch.stack([source[s:s + context] for s in starts])
        return x, y

    # -- the model ------------------------------------------------------------------------
    class CausalSelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            future = torch.triu(torch.ones(context, context, dtype=torch.bool), diagonal=1)
            self.register_buffer("future", future)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, c = x.shape
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2)
                       for z in self.qkv(x).split(width, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.future[:t, :t])
            return self.proj(y.transpose(1, 2).reshape(b, t, c))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attn = CausalSelfAttention()
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, width)
            self.pos = nn.Embedding(context, width)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            h = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            return self.head(self.ln_f(self.blocks(h)))

    @torch.no_grad()
    def sample(texts: list[str], n: int) -> list[str]:
        idx = pad_sequence([encode(s) for s in texts], batch_first=True, padding_value=0)
        for _ in range(n):
            logits = model(idx[:, -context:])
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return [decode(row) for row in idx]

    # -- training -------------------------------------------------------------------------
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            x, y = get_batch(train_data)
            loss = criterion(model(x).reshape(-1, vocab), y.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            debugger.record_loss(loss.detach())
        # -- evaluation and samples -------------------------------------------------------
        model.eval()
        samples = sample(prompts, new_tokens)
    alone = [sample([p], new_tokens)[0] for p in prompts]
    val = val_data[:len(val_data) // (context + 1) * (context + 1)].view(-1, context + 1)
    metrics = {"losses": debugger.loss_history, "final_loss": debugger.loss_history[-1],
               "val_loss": next_token_loss(model, val), "samples": samples,
               "samples_alone_agree": sum(a == s for a, s in zip(alone, samples)) / len(prompts),
               "causality_findings": len(check_causality(model, val[:4, :-1]))}
    return Outcome(metrics, debugger)


def train_fixed(seed: int) -> Outcome:
    from lesson import NetworkDebugger, check_causality

    # -- configuration --------------------------------------------------------------------
    context, batch_size = 32, 32
    width, heads, layers = 32, 4, 2
    steps, lr, weight_decay = 300, 1e-2, 0.1
    prompts, new_tokens = ["shall i ", "love is not ", "the world ", "so long as "], 24

    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)

    # -- tokenizer and data: characters; id 0 pads a batch of prompts ----------------------
    text = corpus().lower()
    itos = ["<pad>"] + sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(itos)}
    vocab = len(itos)

    def encode(s: str) -> torch.Tensor:
        return torch.tensor([stoi[ch] for ch in s])

    def decode(ids: torch.Tensor) -> str:
        return "".join(itos[i] for i in ids.tolist() if i != 0)

    data = encode(text)
    train_data, val_data = data[:int(0.9 * len(data))], data[int(0.9 * len(data)):]

    def get_batch(source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(len(source) - context - 1, (batch_size,), generator=g)
        x = torch.stack([source[s:s + context] for s in starts])
        y = torch.stack([source[s + 1:s + context + 1] for s in starts])
        return x, y

    # -- the model ------------------------------------------------------------------------
    class CausalSelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            future = torch.triu(torch.ones(context, context, dtype=torch.bool), diagonal=1)
            self.register_buffer("future", future)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, c = x.shape
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2)
                       for z in self.qkv(x).split(width, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=~self.future[:t, :t])
            return self.proj(y.transpose(1, 2).reshape(b, t, c))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attn = CausalSelfAttention()
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, width)
            self.pos = nn.Embedding(context, width)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            h = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            return self.head(self.ln_f(self.blocks(h)))

    @torch.no_grad()
    def sample(texts: list[str], n: int) -> list[str]:
        out = []
        for s in texts:                      # one prompt at a time: no padding to read
            idx = encode(s)[None]
            for _ in range(n):
                logits = model(idx[:, -context:])
                idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            out.append(decode(idx[0]))
        return out

    # -- training -------------------------------------------------------------------------
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion) as debugger:
        for step in range(steps):
            x, y = get_batch(train_data)
            loss = criterion(model(x).reshape(-1, vocab), y.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            debugger.record_loss(loss.detach())
        # -- evaluation and samples -------------------------------------------------------
        model.eval()
        samples = sample(prompts, new_tokens)
    alone = [sample([p], new_tokens)[0] for p in prompts]
    val = val_data[:len(val_data) // (context + 1) * (context + 1)].view(-1, context + 1)
    metrics = {"losses": debugger.loss_history, "final_loss": debugger.loss_history[-1],
               "val_loss": next_token_loss(model, val), "samples": samples,
               "samples_alone_agree": sum(a == s for a, s in zip(alone, samples)) / len(prompts),
               "causality_findings": len(check_causality(model, val[:4, :-1]))}
    return Outcome(metrics, debugger)
