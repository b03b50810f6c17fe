"""Small sequence models and offline data for the sequence-debugger tests (issue 29).

Four healthy models of different styles (a causal LM with hand-written attention through
F.scaled_dot_product_attention, an nn.TransformerEncoder classifier with a key padding mask, a
GRU tagger over padded sentences, a GRU seq2seq with teacher forcing), each with switches that
break it the way practitioners do. Data is made in code: a Markov language whose entropy floor
is known, and padded batches of variable length with a configurable pad id.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


# -- data ---------------------------------------------------------------------------------------
@dataclass
class Markov:
    """A first-order Markov chain over `vocab` tokens: each token has `choices` equally likely
    successors, so the entropy floor of next-token prediction is ln(choices) nats."""

    vocab: int
    choices: int
    seed: int

    def __post_init__(self) -> None:
        g = torch.Generator().manual_seed(1000 + self.seed)
        self.next = torch.stack([torch.randperm(self.vocab, generator=g)[:self.choices]
                                 for _ in range(self.vocab)])
        self.g = g

    @property
    def floor(self) -> float:
        return math.log(self.choices)

    def sample(self, batch: int, length: int, low: int = 0) -> torch.Tensor:
        """(batch, length) token ids (ids from `low` up; lower ids stay free for padding)."""
        x = torch.empty(batch, length, dtype=torch.long)
        x[:, 0] = torch.randint(0, self.vocab, (batch,), generator=self.g)
        for t in range(1, length):
            pick = torch.randint(0, self.choices, (batch,), generator=self.g)
            x[:, t] = self.next[x[:, t - 1], pick]
        return x + low


def pad_right(seqs: torch.Tensor, lengths: torch.Tensor, pad: int) -> torch.Tensor:
    """Replace each row's positions from its length on by `pad`."""
    positions = torch.arange(seqs.shape[1])
    return torch.where(positions[None, :] < lengths[:, None], seqs, pad)


def lengths_for(batch: int, low: int, high: int, g: torch.Generator) -> torch.Tensor:
    """Random lengths in [low, high], the longest row always full (padded to the longest)."""
    lengths = torch.randint(low, high + 1, (batch,), generator=g)
    lengths[0] = high
    return lengths


# -- a causal LM with hand-written attention ---------------------------------------------------
class Block(nn.Module):
    """Pre-LN block; attention through F.scaled_dot_product_attention (or a hand-written
    softmax of q @ k^T when `handwritten`)."""

    def __init__(self, d: int, heads: int, causal: bool = True, scaled: bool = True,
                 handwritten: bool = False, post_ln: bool = False) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads, self.causal, self.scaled = heads, causal, scaled
        self.handwritten, self.post_ln = handwritten, post_ln

    def attend(self, x: torch.Tensor, pad: torch.Tensor | None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        if self.handwritten or not self.scaled:
            scores = q @ k.transpose(-2, -1)
            if self.scaled:
                scores = scores / math.sqrt(q.shape[-1])
            if self.causal:
                future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
                scores = scores.masked_fill(future, float("-inf"))
            if pad is not None:
                scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
            out = torch.softmax(scores, dim=-1) @ v
        else:
            mask = None if pad is None else ~pad[:, None, None, :]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                 is_causal=self.causal and mask is None)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))

    def forward(self, x: torch.Tensor, pad: torch.Tensor | None = None) -> torch.Tensor:
        if self.post_ln:
            x = self.ln1(x + self.attend(x, pad))
            return self.ln2(x + self.mlp(x))
        x = x + self.attend(self.ln1(x), pad)
        return x + self.mlp(self.ln2(x))


class CausalLM(nn.Module):
    """Token and position embeddings, blocks, a final norm and a head tied to the embedding."""

    def __init__(self, vocab: int, d: int = 32, heads: int = 2, layers: int = 2,
                 length: int = 64, tie: str = "shared", **block: bool) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, d), nn.Embedding(length, d)
        self.blocks = nn.ModuleList([Block(d, heads, **block) for _ in range(layers)])
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        for table in (self.embed, self.pos):
            nn.init.normal_(table.weight, std=0.02)      # GPT-2's init: a tied head starts small
        if tie == "shared":
            self.head.weight = self.embed.weight
        elif tie == "copied":                     # the bug: equal values, two tensors
            self.head.weight.data.copy_(self.embed.weight.data)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


def train_lm(seed: int, *, steps: int = 60, shift: bool = True, debugger_kw: dict | None = None,
             lr: float = 3e-3, vocab: int = 12, choices: int = 3, length: int = 24,
             batch: int = 16, warmup: bool = True, **model_kw) -> dict:
    """Train a CausalLM on a Markov language under the debugger; returns losses, floor,
    findings and the debugger."""
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    lang = Markov(vocab, choices, seed)
    model = CausalLM(vocab, length=length, **model_kw)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LinearLR(opt, 0.1, 1.0, 10) if warmup else None
    losses = []
    with NetworkDebugger(model, opt, **(debugger_kw or {})) as dbg:
        for _ in range(steps):
            seq = lang.sample(batch, length + 1)
            x, y = (seq[:, :-1], seq[:, 1:]) if shift else (seq[:, :-1], seq[:, :-1])
            loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            dbg.record_loss(loss.detach())
            losses.append(loss.item())
        findings = dbg.diagnose()
    return {"losses": losses, "floor": lang.floor, "chance": math.log(vocab),
            "findings": findings, "codes": {f.code for f in findings}, "debugger": dbg,
            "model": model, "lang": lang}


# -- an nn.TransformerEncoder classifier over padded token sequences -------------------------------
class EncoderClassifier(nn.Module):
    """Embedding, nn.TransformerEncoder (batch_first), masked mean pooling, a linear head."""

    def __init__(self, vocab: int, classes: int, pad: int, d: int = 32, heads: int = 4,
                 mask: str = "right", batch_first: bool = True, norm_first: bool = True) -> None:
        super().__init__()
        self.pad, self.mask, self.batch_first = pad, mask, batch_first
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.1,
                                           batch_first=batch_first, norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        mask = {"right": key_padding_mask, "inverted": ~key_padding_mask,
                "none": None}[self.mask]
        h = self.encoder(h, src_key_padding_mask=mask)
        real = (~key_padding_mask).unsqueeze(-1).float()
        return self.head((h * real).sum(1) / real.sum(1))


def count_task(seed: int, batch: int, pad: int, vocab: int = 10, low: int = 6, high: int = 14):
    """Token sequences (ids 1..vocab-1 shifted away from the pad id), padded right; the class
    says whether token a occurs more often than token b."""
    g = torch.Generator().manual_seed(seed)
    ids = [i for i in range(vocab) if i != pad]
    seqs = torch.tensor(ids)[torch.randint(0, len(ids), (batch, high), generator=g)]
    lengths = lengths_for(batch, low, high, g)
    x = pad_right(seqs, lengths, pad)
    a, b = ids[0], ids[1]
    y = ((x == a).sum(1) > (x == b).sum(1)).long()
    return x, y, x == pad


def train_encoder(seed: int, *, steps: int = 80, pad: int = 0, lr: float = 2e-3,
                  batch: int = 32, **model_kw) -> dict:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    model = EncoderClassifier(10, 2, pad, **model_kw)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    crit = nn.CrossEntropyLoss()
    losses = []
    with NetworkDebugger(model, opt, crit) as dbg:
        for step in range(steps):
            x, y, kpm = count_task(seed * 1000 + step, batch, pad)
            loss = crit(model(x, key_padding_mask=kpm), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            x, y, kpm = count_task(10_000 + seed, 256, pad)
            acc = float((model(x, key_padding_mask=kpm).argmax(1) == y).float().mean())
        findings = dbg.diagnose()
    return {"losses": losses, "accuracy": acc, "findings": findings,
            "codes": {f.code for f in findings}, "debugger": dbg}


# -- a GRU tagger over padded sentences --------------------------------------------------------------
class GRUTagger(nn.Module):
    def __init__(self, vocab: int, tags: int, pad: int, d: int = 32, bidirectional: bool = False,
                 read_last: bool = False, batch_first: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=pad)
        self.rnn = nn.GRU(d, d, batch_first=batch_first, bidirectional=bidirectional)
        self.head = nn.Linear(d * (2 if bidirectional else 1), tags)
        self.read_last = read_last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(x))
        if self.read_last:                      # a sequence classifier's summary, at the end
            return self.head(out[:, -1])
        return self.head(out)


def tag_task(seed: int, batch: int, pad: int, vocab: int = 12, low: int = 5, high: int = 16):
    """Tag = (previous token + current token) mod 3 on real positions; padded right."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor([i for i in range(vocab) if i != pad])
    seqs = ids[torch.randint(0, len(ids), (batch, high), generator=g)]
    lengths = lengths_for(batch, low, high, g)
    x = pad_right(seqs, lengths, pad)
    prev = torch.cat([torch.zeros(batch, 1, dtype=torch.long), seqs[:, :-1]], 1)
    tags = (prev + seqs) % 3
    real = torch.arange(high)[None, :] < lengths[:, None]
    return x, tags, real, lengths


def train_tagger(seed: int, *, steps: int = 80, pad: int = 0, ignore_padding: bool = True,
                 lr: float = 1e-2, batch: int = 32, **model_kw) -> dict:
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    model = GRUTagger(12, 3, pad, **model_kw)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    crit = nn.CrossEntropyLoss(ignore_index=-100)
    losses = []
    with NetworkDebugger(model, opt, crit) as dbg:
        for step in range(steps):
            x, tags, real, _ = tag_task(seed * 1000 + step, batch, pad)
            y = torch.where(real, tags, -100) if ignore_padding else tags
            loss = crit(model(x).reshape(-1, 3), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            x, tags, real, _ = tag_task(10_000 + seed, 256, pad)
            acc = float((model(x).argmax(-1) == tags)[real].float().mean())
        findings = dbg.diagnose()
    return {"losses": losses, "accuracy": acc, "findings": findings,
            "codes": {f.code for f in findings}, "debugger": dbg}


# -- a GRU seq2seq with teacher forcing -------------------------------------------------------------
class Seq2Seq(nn.Module):
    """Encoder GRU, decoder GRU that starts from the encoder's state; teacher forcing."""

    def __init__(self, vocab: int, d: int = 48) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.encoder = nn.GRU(d, d, batch_first=True)
        self.decoder = nn.GRU(d, d, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        _, h = self.encoder(self.embed(src))
        out, _ = self.decoder(self.embed(tgt_in), h)
        return self.head(out)


def train_seq2seq(seed: int, *, steps: int = 120, lr: float = 1e-2, batch: int = 32,
                  length: int = 6, vocab: int = 8) -> dict:
    """Reverse a sequence; BOS is id vocab - 1 (the tokens use 0..vocab-2)."""
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = Seq2Seq(vocab)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    crit = nn.CrossEntropyLoss()
    bos = vocab - 1
    losses = []

    def batch_of(n: int):
        src = torch.randint(0, vocab - 1, (n, length), generator=g)
        tgt = src.flip(1)
        tgt_in = torch.cat([torch.full((n, 1), bos), tgt[:, :-1]], 1)
        return src, tgt_in, tgt

    with NetworkDebugger(model, opt, crit) as dbg:
        for _ in range(steps):
            src, tgt_in, tgt = batch_of(batch)
            loss = crit(model(src, tgt_in).reshape(-1, vocab), tgt.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            src, tgt_in, tgt = batch_of(256)
            acc = float((model(src, tgt_in).argmax(-1) == tgt).float().mean())
        findings = dbg.diagnose()
    return {"losses": losses, "accuracy": acc, "findings": findings,
            "codes": {f.code for f in findings}, "debugger": dbg}
