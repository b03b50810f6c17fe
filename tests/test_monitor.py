"""NetworkDebugger: the lesson's API, the record format, sampling, and robustness on real models."""
from __future__ import annotations

import gc
import os
import math
import warnings
import weakref

import pytest
import torch
from torch import nn

import lesson
from lesson.findings import Finding
from lesson.debugger.monitor import NetworkDebugger


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))


def step(model, opt, dbg, x, y, crit=nn.CrossEntropyLoss()):
    opt.zero_grad()
    loss = crit(model(x), y)
    dbg.record_loss(loss.detach())
    loss.backward()
    opt.step()
    return loss


# -- the lesson's API ---------------------------------------------------------------------------
def test_lesson_attributes_and_methods_exist():
    model = mlp()
    dbg = NetworkDebugger(model)
    for name in ["activation_stats", "gradient_stats", "loss_history", "hooks", "lr_losses"]:
        assert hasattr(dbg, name)
    assert dbg.loss_history == [] and dbg.activation_stats == {} and dbg.hooks
    assert dbg.check_loss_health() == "NOT_ENOUGH_DATA"
    assert dbg.check_activations() == ["HEALTHY"] and dbg.check_gradients() == ["HEALTHY"]
    dbg.remove_hooks()
    assert dbg.hooks == []


def test_stats_have_the_lesson_keys_and_plausible_values():
    torch.manual_seed(0)
    model, x, y = mlp(), torch.randn(64, 10), torch.randint(0, 2, (64,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with NetworkDebugger(model) as dbg:
        step(model, opt, dbg, x, y)
        act = dbg.activation_stats
        assert set(act) == {"0", "1", "2"}
        assert {"mean", "std", "fraction_zero", "min", "max"} <= set(act["1"])
        with torch.no_grad():
            h = torch.relu(model[0](x))         # weights changed after the step: compare pre-step
    # the statistics describe the forward pass of that step
    assert act["1"]["min"] == 0.0 and 0.2 < act["1"]["fraction_zero"] < 0.8
    assert act["0"]["std"] == pytest.approx(float(h.new_tensor(0).add(
        model[0](x).detach().std(unbiased=False))), rel=0.2)
    grads = dbg.gradient_stats
    assert set(grads) == {"0", "2"}
    assert {"mean", "std", "abs_mean", "max"} <= set(grads["0"])
    assert grads["0"]["abs_mean"] > 0 and grads["0"]["max"] >= grads["0"]["abs_mean"]


def test_gradient_stats_match_the_parameter_gradients():
    torch.manual_seed(0)
    model, x, y = mlp(), torch.randn(64, 10), torch.randint(0, 2, (64,))
    dbg = NetworkDebugger(model)
    nn.CrossEntropyLoss()(model(x), y).backward()
    g = torch.cat([model[2].weight.grad.flatten(), model[2].bias.grad.flatten()])
    s = dbg.gradient_stats["2"]
    assert s["abs_mean"] == pytest.approx(g.abs().mean().item(), rel=1e-5)
    assert s["max"] == pytest.approx(g.abs().max().item(), rel=1e-6)
    assert s["norm"] == pytest.approx(g.norm().item(), rel=1e-5)
    dbg.remove_hooks()


def test_record_loss_accepts_float_and_0dim_tensor_and_reads_lazily():
    dbg = NetworkDebugger(mlp())
    dbg.record_loss(1.5)
    t = torch.tensor(0.5, requires_grad=True) * 2
    dbg.record_loss(t)
    assert isinstance(dbg.loss_history_raw[1], torch.Tensor)      # kept, not synced
    assert not dbg.loss_history_raw[1].requires_grad              # and detached
    assert dbg.loss_history == [1.5, 1.0]
    assert all(isinstance(v, float) for v in dbg.loss_history_raw)
    with pytest.raises(ValueError, match="0-dim"):
        dbg.record_loss(torch.ones(3))
    with pytest.raises(TypeError, match="number"):
        dbg.record_loss("0.3")
    dbg.remove_hooks()


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(TypeError, match="nn.Module"):
        NetworkDebugger("not a model")
    with pytest.raises(TypeError, match="optimizer"):
        NetworkDebugger(mlp(), optimizer="adam")
    with pytest.raises(ValueError, match="every"):
        NetworkDebugger(mlp(), every=0)
    with pytest.raises(TypeError, match="criterion"):
        NetworkDebugger(mlp(), criterion=3)


def test_context_manager_removes_every_hook():
    model = mlp()
    with NetworkDebugger(model) as dbg:
        assert dbg.hooks
    assert dbg.hooks == []
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert all(not m._forward_hooks for m in model.modules())
    model(torch.randn(4, 10)).sum().backward()        # no hook fires any more
    assert dbg.history == []


# -- records, sampling, callbacks ----------------------------------------------------------------
def test_record_format_and_sampling_schedule():
    torch.manual_seed(0)
    model, x, y = mlp(), torch.randn(32, 10), torch.randint(0, 2, (32,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    seen: list[dict] = []
    with NetworkDebugger(model, opt, every=5, warmup=3, full_every=10) as dbg:
        dbg.add_callback(seen.append)
        for _ in range(17):
            step(model, opt, dbg, x, y)
    assert [r["step"] for r in dbg.history] == [0, 1, 2, 5, 10, 15]
    assert seen == dbg.history and dbg.snapshot() is dbg.history[-1]
    full = [r["step"] for r in dbg.history if r["params"]["0.weight"]["update_ratio"] is not None]
    assert full == [0, 1, 2, 10]                  # warm-up, then one statistics step in two
    assert [r["step"] for r in dbg.history if r["full"]] == full
    light = dbg.history[-1]["layers"]["1"]
    assert light["act_mean"] > 0 and light["dead_fraction"] is not None
    assert light["act_min"] is light["sample_std"] is light["zero_fraction"] is None
    rec = dbg.history[-2]
    assert set(rec) >= {"step", "loss", "lr", "layers", "params"}
    assert rec["lr"] == 1e-3 and rec["loss"] == pytest.approx(dbg.loss_history[10])
    layer = rec["layers"]["1"]
    for key in ["kind", "act_mean", "act_std", "act_min", "act_max", "zero_fraction",
                "dead_fraction", "sample_std", "nonfinite"]:
        assert key in layer
    assert layer["kind"] == "ReLU" and rec["layers"]["0"]["dead_fraction"] is None
    p = rec["params"]["0.weight"]
    for key in ["grad_norm", "weight_norm", "update_ratio", "nonfinite_grad"]:
        assert key in p
    assert 1e-5 < p["update_ratio"] < 1e-1
    for value in [rec["step"], rec["loss"], rec["lr"], layer["act_mean"], p["grad_norm"]]:
        assert type(value) in (int, float)


def test_measuring_hooks_are_attached_on_statistics_steps_only():
    """Between statistics steps the watched modules and parameters carry no measuring hook,
    so nn.Module takes its fast path; they come back for the next statistics step."""
    torch.manual_seed(0)
    model, x, y = mlp(), torch.randn(32, 10), torch.randint(0, 2, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    attached: list[bool] = []
    probe = model[1].register_forward_pre_hook(       # what the ReLU carries when it runs
        lambda m, args: attached.append(bool(m._forward_hooks)))
    with NetworkDebugger(model, opt, every=5, warmup=2) as dbg:
        for _ in range(12):
            step(model, opt, dbg, x, y)
        assert not model[0].weight._post_accumulate_grad_hooks       # step 12: not measured
        mid = NetworkDebugger(model, opt)        # its step 0 is measured: hooks attached ...
        model(x)
        mid.remove_hooks()                       # ... and removed with the others, mid-step
    probe.remove()
    assert attached == [s < 2 or s % 5 == 0 for s in range(12)] + [True]
    assert [r["step"] for r in dbg.history] == [0, 1, 5, 10]
    assert not model[1]._forward_hooks and not model[0].weight._post_accumulate_grad_hooks


def test_update_ratio_is_measured_exactly():
    torch.manual_seed(0)
    model, x, y = mlp(), torch.randn(32, 10), torch.randint(0, 2, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with NetworkDebugger(model, opt, every=1) as dbg:
        before = model[0].weight.detach().clone()
        step(model, opt, dbg, x, y)
    expected = (model[0].weight.detach() - before).norm() / before.norm()
    assert dbg.history[0]["params"]["0.weight"]["update_ratio"] == pytest.approx(
        expected.item(), rel=1e-4)


def test_history_is_bounded_and_keeps_the_first_record():
    torch.manual_seed(0)
    model, x, y = mlp(), torch.randn(8, 10), torch.randint(0, 2, (8,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with NetworkDebugger(model, opt, every=1, max_history=10) as dbg:
        for _ in range(40):
            step(model, opt, dbg, x, y)
    assert len(dbg.history) <= 10
    assert dbg.history[0]["step"] == 0 and dbg.history[-1]["step"] == 39
    assert len(dbg.loss_history) == 40


def test_without_optimizer_each_pass_after_backward_is_a_step():
    torch.manual_seed(0)
    model, x, y = mlp(), torch.randn(16, 10), torch.randint(0, 2, (16,))
    dbg = NetworkDebugger(model, every=1)
    for _ in range(4):
        model.zero_grad()
        loss = nn.CrossEntropyLoss()(model(x), y)
        dbg.record_loss(loss.item())
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
    assert [r["step"] for r in (dbg.snapshot() and dbg.history)] == [0, 1, 2, 3]
    assert all(r["params"]["0.weight"]["grad_norm"] > 0 for r in dbg.history)
    dbg.remove_hooks()


def test_print_report_shows_findings_evidence_fix_and_tables(capsys):
    torch.manual_seed(0)
    model, x, y = mlp(), torch.randn(64, 10), torch.randint(0, 2, (64,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with NetworkDebugger(model, opt) as dbg:
        for _ in range(12):
            loss = nn.CrossEntropyLoss()(model(x), y)     # no zero_grad: MISSING_ZERO_GRAD
            dbg.record_loss(loss.item())
            loss.backward()
            opt.step()
        dbg.print_report()
    out = capsys.readouterr().out
    assert "MISSING_ZERO_GRAD" in out and "evidence:" in out and "fix:" in out
    assert "Per-layer activation stats" in out and "Per-layer gradient stats" in out
    assert out.index("MISSING_ZERO_GRAD") < out.index("Per-layer activation stats")


def test_diagnose_returns_sorted_findings():
    from lesson.findings import sort_findings
    torch.manual_seed(0)
    model, x, y = mlp(), torch.randn(64, 10), (torch.randn(64) > 0).long()
    opt = torch.optim.SGD(model.parameters(), lr=1e4)
    with NetworkDebugger(model, opt) as dbg:
        for _ in range(10):
            step(model, opt, dbg, x, y)
    found = dbg.diagnose()
    assert found and all(isinstance(f, Finding) for f in found)
    assert found == sort_findings(found)
    assert all(f.message and f.advice and isinstance(f.evidence, dict) for f in found)


# -- robustness ---------------------------------------------------------------------------------
class TupleOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(10, 8), nn.Linear(8, 2)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.b(h), {"hidden": h}


class DictOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(10, 2)

    def forward(self, x):
        return {"logits": self.a(x), "aux": x.sum()}


class Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.shared, self.act, self.out = nn.Linear(10, 10), nn.ReLU(inplace=True), nn.Linear(10, 2)

    def forward(self, x):
        return self.out(self.act(self.shared(self.act(self.shared(x)))))


def _run(model: nn.Module, x: torch.Tensor, out_fn, steps: int = 3) -> NetworkDebugger:
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")         # no warning may leak from the hooks
        with NetworkDebugger(model, opt, every=1) as dbg:
            for _ in range(steps):
                opt.zero_grad()
                loss = out_fn(model(x)).float().pow(2).mean()
                dbg.record_loss(loss.detach())
                loss.backward()
                opt.step()
            with torch.no_grad():
                model(x)                      # a forward with no backward
            dbg.diagnose()
    return dbg


@pytest.mark.parametrize("case", ["tuple", "dict", "twice_inplace", "frozen", "conv_bn", "lstm",
                                  "mha", "transformer"])
def test_no_crash_and_sensible_stats_on_real_models(case):
    torch.manual_seed(0)
    x = torch.randn(8, 10)
    out_fn = lambda o: o  # noqa: E731
    if case == "tuple":
        model, out_fn = TupleOut(), lambda o: o[0]
    elif case == "dict":
        model, out_fn = DictOut(), lambda o: o["logits"]
    elif case == "twice_inplace":
        model = Twice()
    elif case == "frozen":
        model = mlp()
        model[0].requires_grad_(False)
    elif case == "conv_bn":
        model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                              nn.Linear(4 * 6 * 6, 2))
        x = torch.randn(8, 3, 8, 8)
    elif case == "lstm":
        class L(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.rnn, self.head = nn.LSTM(10, 16, batch_first=True), nn.Linear(16, 2)

            def forward(self, x):
                out, _ = self.rnn(x)
                return self.head(out[:, -1])
        model, x = L(), torch.randn(8, 5, 10)
    elif case == "mha":
        class A(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.att = nn.MultiheadAttention(10, 2, batch_first=True)

            def forward(self, x):
                return self.att(x, x, x)[0]
        model, x = A(), torch.randn(8, 5, 10)
    elif case == "transformer":
        layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")    # torch's own nested-tensor notice at build time
            model = nn.TransformerEncoder(layer, num_layers=2)
        x = torch.randn(8, 5, 16)
    dbg = _run(model, x, out_fn)
    rec = dbg.history[-1]
    assert rec["layers"], "no activation was measured"
    for s in rec["layers"].values():
        assert math.isfinite(s["act_mean"]) and s["act_std"] >= 0 and s["nonfinite"] == 0
        assert 0.0 <= s["zero_fraction"] <= 1.0
    grads = [p["grad_norm"] for p in rec["params"].values() if p["grad_norm"] is not None]
    assert grads and all(g >= 0 and math.isfinite(g) for g in grads)
    if case == "twice_inplace":
        assert rec["layers"]["act"]["zero_fraction"] > 0
    if case == "frozen":
        assert "0.weight" not in rec["params"]
        assert not any(f.code in {"NO_GRADIENT", "PARAMS_NOT_UPDATED"} for f in dbg.diagnose())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype):
    torch.manual_seed(0)
    model = mlp().to(dtype)
    x = torch.randn(16, 10, dtype=dtype)
    dbg = _run(model, x, lambda o: o)
    rec = dbg.history[-1]
    assert all(math.isfinite(s["act_std"]) for s in rec["layers"].values())
    assert rec["params"]["0.weight"]["grad_norm"] > 0


def test_forward_under_no_grad_only():
    model = mlp()
    with NetworkDebugger(model) as dbg, torch.no_grad():
        for _ in range(3):
            model(torch.randn(8, 10))
    assert dbg.activation_stats["1"]["fraction_zero"] > 0
    assert dbg.diagnose() == [] or all(f.code == "TRAIN_MODE_DURING_EVAL"
                                       for f in dbg.diagnose())


def test_hooks_keep_no_reference_to_activations():
    torch.manual_seed(0)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    captured: list[weakref.ref] = []
    model[1].register_forward_hook(lambda m, i, o: captured.append(weakref.ref(o)))
    with NetworkDebugger(model, opt, every=1) as dbg:
        for _ in range(5):
            step(model, opt, dbg, torch.randn(16, 10), torch.randint(0, 2, (16,)))
        gc.collect()
        assert all(ref() is None for ref in captured)   # nothing holds the activations


def _live_tensors() -> int:
    gc.collect()
    return sum(type(o) in (torch.Tensor, nn.Parameter) for o in gc.get_objects())


def _drop_losses(dbg: NetworkDebugger) -> None:
    """Forget the recorded losses, after the records that read them are written."""
    assert dbg.history is not None          # writes the records still waiting for the host
    dbg.loss_history_raw.clear()
    dbg._loss_mark = 0


@pytest.mark.slow
def test_memory_stays_flat_over_many_steps():
    """Live tensors and Python memory do not grow with steps (history is bounded); the
    10,000-step version is benchmarks/bench_monitor_memory.py."""
    import tracemalloc
    torch.manual_seed(0)
    model, x, y = mlp(), torch.randn(16, 10), torch.randint(0, 2, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with NetworkDebugger(model, opt, every=1, max_history=10) as dbg:
        for _ in range(50):                   # the bounded history fills up first
            step(model, opt, dbg, x, y)
        _drop_losses(dbg)                     # the one list that grows by design (a float/step)
        base = _live_tensors()
        tracemalloc.start()
        for _ in range(300):                  # records made while tracing replace the old ones,
            step(model, opt, dbg, x, y)       # and torch's function-mode paths warm up
        _drop_losses(dbg)
        gc.collect()
        snap0 = tracemalloc.take_snapshot()
        for _ in range(300):
            step(model, opt, dbg, x, y)
        _drop_losses(dbg)
        gc.collect()
        snap1 = tracemalloc.take_snapshot()
        tracemalloc.stop()
        # only what the debugger's own code allocated: other tests' background threads (wandb's
        # service, say) may still be allocating in this process
        ours = [tracemalloc.Filter(True, os.path.join(os.path.dirname(lesson.__file__), "*"))]
        snap0, snap1 = snap0.filter_traces(ours), snap1.filter_traces(ours)
        grown = sum(s.size_diff for s in snap1.compare_to(snap0, "filename"))
        assert _live_tensors() <= base + 5
        assert grown < 40_000, f"{grown} bytes of Python memory grew over 300 steps"


def test_two_optimizers_over_one_model_are_not_params_not_updated():
    """A GAN-style loop: each half of the model has its own optimizer; the debugger got one."""
    torch.manual_seed(0)
    model, x, y = mlp(), torch.randn(32, 10), torch.randint(0, 2, (32,))
    opt_a = torch.optim.SGD(model[0].parameters(), lr=0.1)
    opt_b = torch.optim.Adam(model[2].parameters(), lr=1e-3)
    with NetworkDebugger(model, opt_a, every=1) as dbg:
        for _ in range(6):
            opt_a.zero_grad()
            opt_b.zero_grad()
            loss = nn.CrossEntropyLoss()(model(x), y)
            dbg.record_loss(loss.detach())
            loss.backward()
            opt_a.step()
            opt_b.step()
    assert "PARAMS_NOT_UPDATED" not in [f.code for f in dbg.diagnose()]
