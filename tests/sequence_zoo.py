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


# -- an nn.TransformerEncoder classifier over padded token sequences ------------------------------
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


# -- a GRU tagger over padded sentences -----------------------------------------------------------
class GRUTagger(nn.Module):
    def __init__(self, vocab: int, tags: int, pad: int, d: int = 32, bidirectional: bool = False,
                 batch_first: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=pad)
        self.rnn = nn.GRU(d, d, batch_first=batch_first, bidirectional=bidirectional)
        self.head = nn.Linear(d * (2 if bidirectional else 1), tags)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(x))
        return self.head(out)


class GRUClassifier(nn.Module):
    """A GRU over padded tokens; the summary is read at each row's last token (`read="own"`)
    or at the batch's last position (`read="last"`, the bug on right-padded rows), or the GRU
    is fed (batch, time) as (time, batch) (`batch_first=False`, the other bug)."""

    def __init__(self, vocab: int, classes: int, pad: int, d: int = 32, read: str = "own",
                 batch_first: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=pad)
        self.rnn = nn.GRU(d, d, batch_first=batch_first)
        self.head = nn.Linear(d, classes)
        self.read, self.pad = read, pad

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(x))
        if self.read == "last":
            return self.head(out[:, -1])
        return self.head(out[torch.arange(x.shape[0]), lengths - 1])


def train_gru_classifier(seed: int, *, steps: int = 80, pad: int = 0, lr: float = 1e-2,
                         batch: int = 32, **model_kw) -> dict:
    """Class = the tag of the last real token (see tag_task)."""
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    model = GRUClassifier(12, 3, pad, **model_kw)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    crit = nn.CrossEntropyLoss()
    losses = []

    def data(s: int, n: int):
        x, tags, _, lengths = tag_task(s, n, pad)
        return x, lengths, tags[torch.arange(n), lengths - 1]

    with NetworkDebugger(model, opt, crit) as dbg:
        for step in range(steps):
            x, lengths, y = data(seed * 1000 + step, batch)
            loss = crit(model(x, lengths), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            x, lengths, y = data(10_000 + seed, 256)
            acc = float((model(x, lengths).argmax(-1) == y).float().mean())
        findings = dbg.diagnose()
    return {"losses": losses, "accuracy": acc, "findings": findings,
            "codes": {f.code for f in findings}, "debugger": dbg}


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


# -- a GRU seq2seq with teacher forcing -----------------------------------------------------------
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


# -- a causal LM on padded documents: padding in the loss, accumulation, generation ---------------
def padded_documents(lang: Markov, batch: int, length: int, pad: int, low: int,
                     g: torch.Generator) -> torch.Tensor:
    """(batch, length + 1) documents of random lengths, right-padded with `pad` (the Markov
    tokens use ids from `low` up, so the pad id is never text)."""
    seqs = lang.sample(batch, length + 1, low=low)
    lengths = lengths_for(batch, length // 3, length + 1, g)
    return pad_right(seqs, lengths, pad)


def train_padded_lm(seed: int, *, steps: int = 60, pad: int = 0, ignore: bool = True,
                    micro: int = 1, weighted: bool = True, generate: str | None = None,
                    vocab: int = 10, length: int = 20, batch: int = 16, lr: float = 3e-3) -> dict:
    """A causal LM trained on right-padded documents. `ignore`: the loss ignores the pad id.
    `micro` > 1: gradient accumulation over micro-batches cut at different lengths, their mean
    losses averaged (`weighted=False`, the bug) or summed and divided by the step's token
    count. `generate`: after training, greedy generation from prompts "unpadded",
    "left_padded" (no mask: the bug)."""
    from lesson import NetworkDebugger

    if pad not in (0, vocab):
        raise ValueError("the pad id is 0 (text from 1) or vocab (text from 0)")
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    low = 1 if pad == 0 else 0
    total = vocab + 1
    lang = Markov(vocab, 3, seed)
    model = CausalLM(total, length=length + 8)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    with NetworkDebugger(model, opt) as dbg:
        for _ in range(steps):
            docs = padded_documents(lang, batch, length, pad, low, g)
            opt.zero_grad()
            parts = docs.chunk(micro)
            cuts = [length + 1 - 4 * i for i in range(len(parts))]  # different lengths
            counted = []
            for part, cut in zip(parts, cuts):
                x, y = part[:, :cut - 1], part[:, 1:cut]
                counted.append(int((y != pad).sum()) if ignore else y.numel())
            step_loss = 0.0
            for part, cut, n in zip(parts, cuts, counted):
                x, y = part[:, :cut - 1], part[:, 1:cut]
                logits = model(x).reshape(-1, total)
                kw = {"ignore_index": pad} if ignore else {}
                if micro == 1 or not weighted:
                    loss = F.cross_entropy(logits, y.reshape(-1), **kw) / micro
                else:
                    loss = F.cross_entropy(logits, y.reshape(-1), reduction="sum", **kw) \
                        / sum(counted)
                loss.backward()
                step_loss += loss.item()
            opt.step()
            dbg.record_loss(step_loss)
            losses.append(step_loss)
        if generate:
            model.eval()
            prompts = lang.sample(4, 6, low=low)
            if generate == "left_padded":
                prompts[1:, :3] = pad
            with torch.no_grad():
                out = prompts
                for _ in range(5):
                    nxt = model(out)[:, -1].argmax(-1, keepdim=True)
                    out = torch.cat([out, nxt], 1)
        findings = dbg.diagnose()
    return {"losses": losses, "floor": lang.floor, "findings": findings,
            "codes": {f.code for f in findings}, "debugger": dbg}


# -- other styles: an HF-style model, nn.TransformerEncoder with a causal mask, an LSTM LM,
#    time-first batches ------------------------------------------------------------------------
class Output(dict):
    """What Hugging Face models return: a dict whose keys are also attributes."""

    __getattr__ = dict.__getitem__


class HFStyleLM(nn.Module):
    """model(input_ids=..., attention_mask=..., labels=...) -> Output(loss=..., logits=...); the
    attention mask (1 at real tokens) becomes an additive float mask for SDPA, with the causal
    mask (`causal=False`: the bug)."""

    def __init__(self, vocab: int, d: int = 32, heads: int = 2, length: int = 64,
                 causal: bool = True, invert_mask: bool = False) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, d), nn.Embedding(length, d)
        self.ln, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.lm_head = nn.Linear(d, vocab)
        self.heads, self.causal, self.invert = heads, causal, invert_mask

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> Output:
        b, t = input_ids.shape
        h = self.embed(input_ids) + self.pos(torch.arange(t, device=input_ids.device))
        q, k, v = self.qkv(self.ln(h)).chunk(3, -1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        allowed = torch.ones(b, 1, t, t, dtype=torch.bool, device=h.device)
        if self.causal:
            allowed = allowed & torch.ones(t, t, dtype=torch.bool, device=h.device).tril()
        if attention_mask is not None:
            keep = attention_mask.bool() if not self.invert else ~attention_mask.bool()
            allowed = allowed & keep[:, None, None, :]
        bias = torch.zeros(allowed.shape, device=h.device).masked_fill(
            ~allowed, torch.finfo(torch.float32).min)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        h = h + self.proj(a.transpose(1, 2).reshape(b, t, -1))
        logits = self.lm_head(h)
        out = Output(logits=logits)
        if labels is not None:
            out["loss"] = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                          labels[:, 1:].reshape(-1), ignore_index=-100)
        return out


def train_hf(seed: int, *, steps: int = 60, pad: int = 0, causal: bool = True,
             invert_mask: bool = False, left: bool = False, vocab: int = 10, length: int = 16,
             batch: int = 16) -> dict:
    """HF-style training: labels = input_ids with -100 at the padding; the model shifts them.
    Left padding with `left`."""
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    lang = Markov(vocab, 3, seed)
    low = 1 if pad == 0 else 0
    model = HFStyleLM(vocab + 1, length=length, causal=causal, invert_mask=invert_mask)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    with NetworkDebugger(model, opt) as dbg:
        for _ in range(steps):
            ids = padded_documents(lang, batch, length - 1, pad, low, g)
            if left:
                real = ids != pad
                ids = torch.stack([torch.cat([r[~m], r[m]]) for r, m in zip(ids, real)])
            mask = (ids != pad).long()
            labels = ids.masked_fill(mask == 0, -100)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
            losses.append(loss.item())
        findings = dbg.diagnose()
    return {"losses": losses, "floor": lang.floor, "findings": findings,
            "codes": {f.code for f in findings}, "debugger": dbg}


class TorchDecoderLM(nn.Module):
    """A decoder-only LM from nn.TransformerEncoder with a causal mask; `batch_first=False`
    takes time-first (T, B) token batches. `mask="causal"` (healthy), "none", or "offset" (a
    mask shifted by one: every position sees the next one)."""

    def __init__(self, vocab: int, d: int = 32, heads: int = 4, batch_first: bool = True,
                 mask: str = "causal", norm_first: bool = True, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(64, d))
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=batch_first,
                                           norm_first=norm_first)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)
        self.batch_first, self.mask = batch_first, mask

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1] if self.batch_first else x.shape[0]
        pos = self.pos[:t] if self.batch_first else self.pos[:t, None]
        h = self.embed(x) + pos
        if self.mask == "none":
            return self.head(self.body(h))
        diagonal = 1 if self.mask == "causal" else 2
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(diagonal)
        return self.head(self.body(h, mask=mask))


class LSTMLM(nn.Module):
    def __init__(self, vocab: int, d: int = 48, bidirectional: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.rnn = nn.LSTM(d, d, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(d * (2 if bidirectional else 1), vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.embed(x))[0])


def train_plain_lm(model: nn.Module, seed: int, *, steps: int = 60, batch_first: bool = True,
                   vocab: int = 12, length: int = 20, batch: int = 16, lr: float = 3e-3,
                   dropout_eval: bool = False, warmup: int = 0) -> dict:
    """Next-token training of any (x) -> logits model on a Markov language; time-first batches
    with `batch_first=False`; `warmup` steps of a linear warm-up from 1% of `lr`, then a cosine
    decay."""
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    lang = Markov(vocab, 3, seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [
        torch.optim.lr_scheduler.LinearLR(opt, 0.01, 1.0, warmup),
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps - warmup)], [warmup]) \
        if warmup else None
    crit = nn.CrossEntropyLoss()
    losses = []
    with NetworkDebugger(model, opt, crit) as dbg:
        for _ in range(steps):
            seq = lang.sample(batch, length + 1)
            if not batch_first:
                seq = seq.t().contiguous()
            x, y = (seq[:, :-1], seq[:, 1:]) if batch_first else (seq[:-1], seq[1:])
            loss = crit(model(x).reshape(-1, vocab), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            dbg.record_loss(loss.detach())
            losses.append(loss.item())
        findings = dbg.diagnose()
    return {"losses": losses, "floor": lang.floor, "findings": findings,
            "codes": {f.code for f in findings}, "debugger": dbg}


# -- padding the model itself handles: a summary token prepended inside, masks built inside,
#    packed recurrent batches ----------------------------------------------------------------------
class SummaryClassifier(nn.Module):
    """A classifier in BERT's manner: the model prepends a summary token to the ids it is
    given, builds the padding mask itself from the pad id, and reads the summary position.
    `attention`: "encoder" (nn.TransformerEncoder, src_key_padding_mask), "mha" (blocks of
    nn.MultiheadAttention, key_padding_mask) or "sdpa" (F.scaled_dot_product_attention with a
    boolean attn_mask, True where attention is allowed). `mask`: "padding" (True at the
    padding, the healthy one), "inverted" (True at the tokens: an HF attention_mask passed
    where PyTorch's convention is expected) or "none"."""

    def __init__(self, vocab: int, classes: int, pad: int, attention: str = "encoder",
                 mask: str = "padding", d: int = 32, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.pad, self.summary, self.attention, self.mask = pad, vocab, attention, mask
        self.embed = nn.Embedding(vocab + 1, d)
        self.position = nn.Embedding(64, d)
        if attention == "encoder":
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                               norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        elif attention == "mha":
            self.attn = nn.ModuleList([nn.MultiheadAttention(d, heads, batch_first=True)
                                       for _ in range(layers)])
            self.norms = nn.ModuleList([nn.LayerNorm(d) for _ in range(layers)])
        else:
            self.qkv = nn.ModuleList([nn.Linear(d, 3 * d) for _ in range(layers)])
            self.norms = nn.ModuleList([nn.LayerNorm(d) for _ in range(layers)])
            self.heads = heads
        self.head = nn.Linear(d, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, t = tokens.shape
        tokens = torch.cat([torch.full((b, 1), self.summary, device=tokens.device), tokens], 1)
        h = self.embed(tokens) + self.position(torch.arange(t + 1, device=tokens.device))
        padding = {"padding": tokens == self.pad, "inverted": tokens != self.pad,
                   "none": None}[self.mask]
        if self.attention == "encoder":
            h = self.encoder(h, src_key_padding_mask=padding)
        elif self.attention == "mha":
            for attn, norm in zip(self.attn, self.norms):
                x = norm(h)
                h = h + attn(x, x, x, key_padding_mask=padding, need_weights=False)[0]
        else:
            allowed = None if padding is None else ~padding[:, None, None, :]
            for qkv, norm in zip(self.qkv, self.norms):
                q, k, v = (z.view(b, t + 1, self.heads, -1).transpose(1, 2)
                           for z in qkv(norm(h)).chunk(3, -1))
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
                h = h + a.transpose(1, 2).reshape(b, t + 1, -1)
        return self.head(h[:, 0])


def train_summary(seed: int, *, steps: int = 120, pad: int = 0, lr: float = 3e-3,
                  batch: int = 32, vocab: int = 10, **model_kw) -> dict:
    """SummaryClassifier on count_task (is token a more frequent than token b?). Also returns
    how far the evaluation's class probabilities move when the same sequences get 8 more pad
    tokens (0 for a model that ignores its padding)."""
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    model = SummaryClassifier(vocab, 2, pad, **model_kw)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    crit = nn.CrossEntropyLoss()
    losses = []
    with NetworkDebugger(model, opt, crit) as dbg:
        for step in range(steps):
            x, y, _ = count_task(seed * 1000 + step, batch, pad, vocab)
            loss = crit(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            x, y, _ = count_task(10_000 + seed, 256, pad, vocab)
            probs = model(x).softmax(-1)
            acc = float((probs.argmax(1) == y).float().mean())
            longer = F.pad(x, (0, 8), value=pad)
            moved = float((model(longer).softmax(-1) - probs).abs().max())
        findings = dbg.diagnose()
    return {"losses": losses, "accuracy": acc, "padding_moves": moved, "findings": findings,
            "codes": {f.code for f in findings}, "debugger": dbg}


class PackedClassifier(nn.Module):
    """A GRU or LSTM over a packed batch (it never reads a pad), unpacked with
    pad_packed_sequence, whose outputs stop at the batch's longest row. `read`: "final" (the
    final state h_n, each row's own last step: healthy), "own" (out at each row's length - 1:
    healthy) or "last" (out at the batch's last step: padding, zeros, for the shorter rows).
    `batch_first=False` takes time-first (T, B) batches."""

    def __init__(self, vocab: int, classes: int, pad: int, read: str = "final",
                 cell: str = "gru", batch_first: bool = True, d: int = 32) -> None:
        super().__init__()
        self.pad, self.read, self.batch_first = pad, read, batch_first
        self.embed = nn.Embedding(vocab, d)
        self.rnn = (nn.GRU if cell == "gru" else nn.LSTM)(d, d, batch_first=batch_first)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

        lengths = (tokens != self.pad).sum(1 if self.batch_first else 0)
        packed = pack_padded_sequence(self.embed(tokens), lengths.cpu(),
                                      batch_first=self.batch_first, enforce_sorted=False)
        out, state = self.rnn(packed)
        if self.read == "final":
            h = state[0] if isinstance(state, tuple) else state
            return self.head(h[-1])
        out, _ = pad_packed_sequence(out, batch_first=self.batch_first)
        if self.read == "last":
            return self.head(out[:, -1] if self.batch_first else out[-1])
        rows = torch.arange(len(lengths), device=tokens.device)
        return self.head(out[rows, lengths - 1] if self.batch_first else out[lengths - 1, rows])


def train_packed(seed: int, *, steps: int = 100, pad: int = 0, lr: float = 1e-2,
                 batch: int = 32, extra: int = 4, **model_kw) -> dict:
    """PackedClassifier on tag_task's rows: the class is the tag of the last real token. Every
    row is padded `extra` ids past the longest one can be (a fixed width, as datasets store
    them), so the unpacked outputs are shorter than the batch."""
    from lesson import NetworkDebugger

    torch.manual_seed(seed)
    model = PackedClassifier(12, 3, pad, **model_kw)
    time_first = not model.batch_first
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    crit = nn.CrossEntropyLoss()
    losses = []

    def data(s: int, n: int):
        x, tags, _, lengths = tag_task(s, n, pad, high=14)
        x = F.pad(x, (0, extra), value=pad)
        return (x.t().contiguous() if time_first else x), tags[torch.arange(n), lengths - 1]

    with NetworkDebugger(model, opt, crit) as dbg:
        for step in range(steps):
            x, y = data(seed * 1000 + step, batch)
            loss = crit(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            dbg.record_loss(loss.detach())
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            x, y = data(10_000 + seed, 256)
            acc = float((model(x).argmax(-1) == y).float().mean())
        findings = dbg.diagnose()
    return {"losses": losses, "accuracy": acc, "findings": findings,
            "codes": {f.code for f in findings}, "debugger": dbg}
