"""A zoo of training scripts in practitioners' everyday styles (issue 16): the healthy version of
each gives no finding on 5 seeds, and the one bug injected into each is named."""
from __future__ import annotations

from typing import Callable

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence

from lesson.debugger.monitor import NetworkDebugger

SEEDS = range(5)
STEPS = 60


def blobs(seed: int, n: int = 64, dim: int = 8, classes: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """A separable classification batch (class centres fixed, noise per seed and call)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dim, generator=torch.Generator().manual_seed(99)) * 2
    y = torch.randint(0, classes, (n,), generator=g)
    return centres[y] + torch.randn(n, dim, generator=g), y


def fit(model: nn.Module, opt: torch.optim.Optimizer, batch: Callable[[int], tuple],
        loss_of: Callable[[nn.Module, tuple], torch.Tensor], *, zero_grad: bool = True,
        debugged: nn.Module | None = None, accumulate: int = 1,
        at: dict[int, Callable[[], None]] | None = None) -> NetworkDebugger:
    dbg = NetworkDebugger(debugged or model, opt)
    for step in range(STEPS):
        if at and step in at:
            at[step]()
        if zero_grad:
            opt.zero_grad()
        for micro in range(accumulate):
            loss = loss_of(model, batch(step * accumulate + micro)) / accumulate
            loss.backward()
            dbg.record_loss(loss.detach() * accumulate)
        opt.step()
    assert dbg.errors == []
    return dbg


# -- the scripts: each returns the debugger of one run ------------------------------------------
class FunctionalMLP(nn.Module):
    def __init__(self, bias: float = 0.0) -> None:
        super().__init__()
        self.fc1, self.fc2, self.out = nn.Linear(8, 64), nn.Linear(64, 64), nn.Linear(64, 3)
        if bias:
            with torch.no_grad():
                self.fc1.bias.fill_(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.fc2(F.relu(self.fc1(x)))))


def functional_mlp(seed: int, bug: bool) -> NetworkDebugger:
    torch.manual_seed(seed)
    model = FunctionalMLP(bias=-8.0 if bug else 0.0)         # bug: most first-layer units dead
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return fit(model, opt, lambda i: blobs(seed * 1000 + i),
               lambda m, b: F.cross_entropy(m(b[0]), b[1]))


class DictNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.Tanh())
        self.cls, self.aux = nn.Linear(32, 3), nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.body(x)
        return {"logits": self.cls(h), "aux": self.aux(h)}


def dict_output(seed: int, bug: bool) -> NetworkDebugger:
    torch.manual_seed(seed)
    model = DictNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def loss_of(m: nn.Module, b: tuple) -> torch.Tensor:
        out = m(b[0])
        logits = out["logits"].softmax(dim=1) if bug else out["logits"]   # bug: double softmax
        return F.cross_entropy(logits, b[1]) + 0.01 * out["aux"].pow(2).mean()
    return fit(model, opt, lambda i: blobs(seed * 1000 + i), loss_of)


def bf16_autocast(seed: int, bug: bool) -> NetworkDebugger:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 64), nn.SiLU(), nn.Linear(64, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def loss_of(m: nn.Module, b: tuple) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.cross_entropy(m(b[0]), b[1])
    return fit(model, opt, lambda i: blobs(seed * 1000 + i), loss_of,
               zero_grad=not bug)                            # bug: zero_grad() forgotten


def float64(seed: int, bug: bool) -> NetworkDebugger:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3)).double()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def loss_of(m: nn.Module, b: tuple) -> torch.Tensor:
        out = m(b[0].double())
        return F.nll_loss(out if bug else F.log_softmax(out, dim=1), b[1])   # bug: no log_softmax
    return fit(model, opt, lambda i: blobs(seed * 1000 + i), loss_of)


class TiedLM(nn.Module):
    def __init__(self, vocab: int = 20, dim: int = 16) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.drop = nn.Dropout(0.1)
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight                   # tied

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.proj(self.drop(self.emb(tokens)))))


def tokens(seed: int, n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 20, (n,), generator=g)
    return x, (x + 1) % 20                                    # next token: learnable


def tied_accumulation(seed: int, bug: bool) -> NetworkDebugger:
    torch.manual_seed(seed)
    model = TiedLM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if bug:
        model.eval()                                          # bug: trains in eval mode
    return fit(model, opt, lambda i: tokens(seed * 1000 + i),
               lambda m, b: F.cross_entropy(m(b[0]), b[1]), accumulate=4)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 32)
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.out = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.layer(self.inp(x)).mean(dim=1))


def sequences(seed: int, n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, 4, generator=g)
    return x, x[:, :, 0].mean(dim=1, keepdim=True)


def transformer_encoder(seed: int, bug: bool) -> NetworkDebugger:
    torch.manual_seed(seed)
    model = Encoder()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def loss_of(m: nn.Module, b: tuple) -> torch.Tensor:
        target = b[1].squeeze(1) if bug else b[1]             # bug: (N, 1) against (N,)
        return F.mse_loss(m(b[0]), target)
    return fit(model, opt, lambda i: sequences(seed * 1000 + i), loss_of)


class PackedGRU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(4, 16, batch_first=True)
        self.out = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, h = self.gru(packed)
        return self.out(h[-1])


def padded(seed: int, n: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 9, (n,), generator=g)
    x = torch.randn(n, 8, 4, generator=g)
    x = x * (torch.arange(8)[None, :, None] < lengths[:, None, None])
    return x, lengths, (x[:, :, 0].sum(dim=1) > 0).long()


def packed_gru(seed: int, bug: bool) -> NetworkDebugger:
    torch.manual_seed(seed)
    model = PackedGRU()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    return fit(model, opt, lambda i: padded(seed * 1000 + i),
               lambda m, b: F.cross_entropy(m(b[0], b[1]), b[2]), zero_grad=not bug)


def compiled(seed: int, bug: bool) -> NetworkDebugger:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
    fast = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return fit(fast, opt, lambda i: blobs(seed * 1000 + i),
               lambda m, b: F.cross_entropy(m(b[0]), b[1]), zero_grad=not bug)


class Backbone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def param_groups_freezing(seed: int, bug: bool) -> NetworkDebugger:
    torch.manual_seed(seed)
    model = Backbone()
    opt = torch.optim.SGD([{"params": model.features.parameters(), "lr": 0.01},
                           {"params": model.head.parameters()}], lr=0.1, momentum=0.9)

    def new_head() -> None:
        model.head = nn.Linear(32, 3)
        if not bug:                                 # bug: the new head is never given to opt
            opt.add_param_group({"params": model.head.parameters()})
    return fit(model, opt, lambda i: blobs(seed * 1000 + i),
               lambda m, b: F.cross_entropy(m(b[0]), b[1]),
               at={5: lambda: model.features.requires_grad_(False), 8: new_head})


ZOO: dict[str, tuple[Callable[[int, bool], NetworkDebugger], str]] = {
    "functional_mlp": (functional_mlp, "DEAD_NEURONS"),
    "dict_output": (dict_output, "DOUBLE_SOFTMAX"),
    "bf16_autocast": (bf16_autocast, "MISSING_ZERO_GRAD"),
    "float64": (float64, "NLL_WITHOUT_LOG_SOFTMAX"),
    "tied_accumulation": (tied_accumulation, "EVAL_MODE_DURING_TRAINING"),
    "transformer_encoder": (transformer_encoder, "LOSS_SHAPE_MISMATCH"),
    "packed_gru": (packed_gru, "MISSING_ZERO_GRAD"),
    "compiled": (compiled, "MISSING_ZERO_GRAD"),
    "param_groups_freezing": (param_groups_freezing, "PARAMS_NOT_UPDATED"),
}


@pytest.mark.parametrize("name", list(ZOO))
def test_healthy_script_has_no_findings(name):
    script, _ = ZOO[name]
    for seed in SEEDS:
        dbg = script(seed, False)
        assert dbg.loss_history[-1] < dbg.loss_history[0]            # it learned
        assert [f.code for f in dbg.diagnose()] == [], (name, seed)


@pytest.mark.parametrize("name", list(ZOO))
def test_injected_bug_is_named(name):
    script, code = ZOO[name]
    assert code in {f.code for f in script(0, True).diagnose()}
