"""The debugger on models as practitioners change them: freezing, swapping, moving; lifecycle;
verdicts that agree with the evidence (issue 16)."""
from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from lesson.debugger.monitor import DEFAULT_FULL_EVERY, NetworkDebugger
from lesson.debugger.rules import Evidence, Thresholds, loss_verdict, rule_overfitting


def tiny() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def train(model, opt, dbg, steps, start=0, at=None):
    g = torch.Generator().manual_seed(start)
    for step in range(start, start + steps):
        if at is not None and step in at:
            at[step]()
        x, y = torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)
        loss = F.cross_entropy(model(x.to(next(model.parameters()).dtype)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        dbg.record_loss(loss.detach())


@pytest.mark.parametrize("frozen,watched", [(0, ["2.bias", "2.weight"]),
                                            (2, ["0.bias", "0.weight"])])
def test_freezing_after_attach_does_not_crash_training(frozen, watched):
    """The issue's minimal case: requires_grad_(False) at step 20 crashed model(x) at step 50.
    Layer 2 holds the gradient sentinel (between statistics steps one parameter keeps a
    gradient hook, the output layer's bias): frozen, the sentinel misses, and hooking every
    parameter again must skip the frozen ones (torch refuses a hook on a tensor without
    gradient, the same crash)."""
    torch.manual_seed(0)
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = NetworkDebugger(model, opt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(model, opt, dbg, 60, at={20: lambda: model[frozen].requires_grad_(False)})
    assert dbg.errors == []
    assert sorted(dbg.history[-1]["params"]) == watched    # frozen: not watched
    assert "NO_GRADIENT" not in {f.code for f in dbg.diagnose()}


def test_unfrozen_layer_is_watched_again():
    torch.manual_seed(0)
    model = tiny()
    model[0].requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = NetworkDebugger(model, opt)
    train(model, opt, dbg, 120, at={60: lambda: model[0].requires_grad_(True)})
    last = dbg.history[-1]["params"]
    assert sorted(last) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert last["0.weight"]["grad_norm"] > 0 and dbg.errors == []


def test_new_param_group_swapped_module_and_dtype_move():
    torch.manual_seed(0)
    model = tiny()
    opt = torch.optim.SGD(model[2].parameters(), lr=0.1)
    dbg = NetworkDebugger(model, opt)

    def swap():
        model[2] = nn.Linear(8, 2)
        opt.add_param_group({"params": model[2].parameters()})

    def add_group():
        opt.add_param_group({"params": model[0].parameters(), "lr": 0.01})
    train(model, opt, dbg, 150, at={30: add_group, 70: swap, 110: lambda: model.double()})
    # float64 inputs from step 110 on
    assert dbg.errors == []
    assert model[2].weight is not None
    codes = {f.code for f in dbg.diagnose()}
    assert "PARAMS_NOT_UPDATED" not in codes and "NO_GRADIENT" not in codes


def test_internal_error_goes_to_errors_with_one_warning(monkeypatch):
    import lesson.debugger.monitor as monitor
    monkeypatch.setattr(monitor, "activation_summary",
                        lambda t: (_ for _ in ()).throw(ValueError("broken statistic")))
    torch.manual_seed(0)
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = NetworkDebugger(model, opt)
    with pytest.warns(RuntimeWarning, match="debugger.errors") as caught:
        train(model, opt, dbg, 5)
    assert len([w for w in caught if "debugger.errors" in str(w.message)]) == 1
    assert dbg.errors and "broken statistic" in dbg.errors[0]


def test_recording_after_remove_hooks_warns_once():
    model = tiny()
    dbg = NetworkDebugger(model)
    dbg.record_loss(1.0)
    dbg.remove_hooks()
    with pytest.warns(RuntimeWarning, match="after remove_hooks") as caught:
        dbg.record_loss(0.9)
        dbg.record_val_loss(0.8)
    assert len(caught) == 1 and dbg.loss_history == [1.0, 0.9]


def test_nan_validation_loss_is_reported():
    model = tiny()
    dbg = NetworkDebugger(model)
    for v in [1.0, 0.9, 0.8]:
        dbg.record_loss(v)
    dbg.record_val_loss(0.7)
    dbg.record_val_loss(float("nan"))
    found = [f for f in dbg.diagnose() if f.code == "NAN_OR_INF"]
    assert found and "validation" in found[0].message
    assert found[0].evidence["first_nonfinite_val_index"] == 1


# -- verdicts that agree with the evidence ---------------------------------------------------
def overfit_evidence(vals: list[float]) -> Evidence:
    losses = [2.0 * 0.97 ** i for i in range(10 * len(vals))]
    return Evidence(losses=losses, val_losses=vals, val_at=[10 * (k + 1) for k in range(len(vals))])


@pytest.mark.parametrize("vals", [
    [0.40, 0.12, 0.060, 0.055, 0.058, 0.061],      # +10% at 99% accuracy: 0.006 absolute
    [0.30, 0.05, 0.0100, 0.0105, 0.0109],          # +9%, 0.0009 absolute
    [0.9, 0.5, 0.30, 0.29, 0.31, 0.28],            # one bad evaluation, not sustained
])
def test_small_or_passing_val_rises_are_not_overfitting(vals):
    assert rule_overfitting(overfit_evidence(vals), Thresholds()) == []


def test_a_sustained_rise_that_matters_is_overfitting():
    vals = [1.674, 1.101, 1.1, 1.084, 1.084, 1.117, 1.149, 1.17, 1.181, 1.188]
    (f,) = rule_overfitting(overfit_evidence(vals), Thresholds())
    assert f.evidence["rise"] == pytest.approx(0.104) and f.evidence["sustained_points"] == 2
    assert "+0.1" in f.message


def test_mini_batch_noise_on_a_falling_loss_is_healthy():
    g = torch.Generator().manual_seed(0)
    for seed in range(9):
        noise = torch.randn(200, generator=g).abs()
        losses = [2.3 * math.exp(-i / 30) + 0.05 + 0.1 * float(n) for i, n in enumerate(noise)]
        assert loss_verdict(losses) == "HEALTHY"


def test_a_loss_at_chance_is_never_healthy():
    # a bad initialisation undone (3.0 -> 2.30 = ln 10), then nothing learned
    losses = [3.0 - 0.1 * i for i in range(7)] + [math.log(10) + 0.01 * (-1) ** i
                                                 for i in range(40)]
    assert loss_verdict(losses) == "HEALTHY"          # without the class count: no way to tell
    assert loss_verdict(losses, chance=math.log(10)) == "NOT_DECREASING"


def test_check_loss_health_knows_chance_from_the_criterion():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 10))
    crit = nn.CrossEntropyLoss()
    dbg = NetworkDebugger(model, criterion=crit)
    with torch.no_grad():
        model[0].weight.mul_(30)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for step in range(60):                          # labels carry no signal: chance at best
        x, y = torch.randn(64, 4), torch.randint(0, 10, (64,))
        loss = crit(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        dbg.record_loss(loss.item())
    assert dbg.loss_inspector.chance_loss() == pytest.approx(math.log(10))
    assert dbg.loss_history[0] > 2 * math.log(10)     # it started well above chance
    assert dbg.check_loss_health() == "NOT_DECREASING"


# -- loop faults seen through the gradient bookkeeping ---------------------------------------
def accumulate(zero_inside: bool, set_to_none: bool = True, freeze_at: int | None = None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    dbg = NetworkDebugger(model, opt)
    g = torch.Generator().manual_seed(0)
    for step in range(60):
        if step == freeze_at:
            model[0].requires_grad_(False)
        opt.zero_grad(set_to_none=set_to_none)
        for _ in range(4):
            if zero_inside:
                opt.zero_grad()
            x, y = torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)
            loss = F.cross_entropy(model(x), y) / 4
            loss.backward()
            dbg.record_loss(loss.detach())
        opt.step()
    return {f.code: f for f in dbg.diagnose()}


def test_zero_grad_inside_accumulation_loop_is_named():
    assert accumulate(zero_inside=False) == {}
    found = accumulate(zero_inside=True)
    assert set(found) == {"ZERO_GRAD_IN_ACCUMULATION"}
    assert found["ZERO_GRAD_IN_ACCUMULATION"].evidence["cleared_steps"] == 60


def test_frozen_weights_moved_by_momentum_are_named():
    assert accumulate(False, set_to_none=True, freeze_at=20) == {}
    found = accumulate(False, set_to_none=False, freeze_at=20)
    assert set(found) == {"FROZEN_PARAMS_MOVE"}
    assert found["FROZEN_PARAMS_MOVE"].evidence["params"] == ["0.bias", "0.weight"]
    assert found["FROZEN_PARAMS_MOVE"].evidence["max_relative_move"] > 1e-4


def freeze_by(how: str, steps: int = 120, freeze_at: int = 20) -> dict:
    """Freeze the first layer at `freeze_at` in one of the ways practitioners do, under SGD
    with momentum and weight decay; the codes found, and how far the layer moved after it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    dbg = NetworkDebugger(model, opt)
    g = torch.Generator().manual_seed(0)
    frozen = model[0].weight
    for step in range(steps):
        if step == freeze_at:
            if how.startswith("requires_grad"):
                model[0].requires_grad_(False)
            kept = frozen.detach().clone()
        if how == "requires_grad, hand-written zero_grad":
            for p in model.parameters():          # zero-fills the frozen layer's old .grad
                if p.grad is not None:
                    p.grad.zero_()
        else:
            opt.zero_grad()
        x, y = torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)
        F.cross_entropy(model(x), y).backward()
        if step >= freeze_at and how in ("grad = None", "grad.zero_()"):
            for p in model[0].parameters():       # "freeze" by discarding the gradient
                if how == "grad = None":
                    p.grad = None
                else:
                    p.grad.zero_()
        opt.step()
        dbg.record_loss(1.0)
    assert dbg.errors == []
    return {"codes": {f.code: f for f in dbg.diagnose()},
            "moved": float((frozen.detach() - kept).norm() / kept.norm())}


@pytest.mark.parametrize("how", ["requires_grad", "grad = None"])
def test_frozen_weights_whose_grad_is_none_stay_and_nothing_is_said(how):
    run = freeze_by(how)
    assert run["moved"] == 0.0 and "FROZEN_PARAMS_MOVE" not in run["codes"]


@pytest.mark.parametrize("how", ["requires_grad, hand-written zero_grad", "grad.zero_()"])
def test_frozen_weights_with_a_zero_filled_grad_move_and_are_named(how):
    """Momentum and weight decay step a zero-filled .grad: the "frozen" layer drifts. Either
    the frozen tensor keeps an old .grad that the loop zero-fills (no gradient arrives), or the
    gradient arrives and is zero-filled after the backward (`p.grad.zero_()`). The first is
    seen at every statistics step; the second takes parameter copies, so full statistics steps
    only (warm-up, then one in DEFAULT_FULL_EVERY steps): the run goes past one of those."""
    run = freeze_by(how, steps=DEFAULT_FULL_EVERY + 30)
    assert run["moved"] > 1e-3                               # the symptom itself
    found = run["codes"]["FROZEN_PARAMS_MOVE"]
    assert found.evidence["params"] == ["0.bias", "0.weight"]
    assert found.evidence["max_relative_move"] > 1e-4


def test_a_network_without_any_gradient_is_not_called_frozen():
    """A dead output ReLU zeroes every gradient; Adam's momentum still moves the weights. No
    tensor was frozen (nothing learns at all), so FROZEN_PARAMS_MOVE is not the diagnosis (the
    unseen seeds 101 and 106 of relu_on_regression_output once said it)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1), nn.ReLU())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    dbg = NetworkDebugger(model, opt)
    x, y = torch.randn(64, 4), torch.randn(64)
    for step in range(120):
        if step == 10:
            with torch.no_grad():                       # kill the output unit for good
                model[2].bias.fill_(-100.0)
        opt.zero_grad()
        loss = F.mse_loss(model(x).squeeze(1), y)
        loss.backward()
        opt.step()
        dbg.record_loss(loss.item())
    assert all(float(p.grad.abs().max()) == 0.0 for p in model.parameters())
    before = model[0].weight.detach().clone()
    opt.step()
    assert not torch.equal(before, model[0].weight)         # momentum moves them all the same
    assert "FROZEN_PARAMS_MOVE" not in {f.code for f in dbg.diagnose()}


class _AttentionPool(nn.Module):
    """Attention pooling over time: softmax cancels the score's bias, so autograd gives that
    bias a gradient of exactly zero on some steps (a rounding of an analytic zero)."""

    def __init__(self) -> None:
        super().__init__()
        self.score, self.head = nn.Linear(4, 1), nn.Linear(4, 2)

    def forward(self, x):
        return self.head((torch.softmax(self.score(x), dim=1) * x).sum(1))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_gradient_autograd_made_zero_is_not_a_frozen_tensor(seed):
    """Adam moves the bias at a step where its gradient is exactly zero, but nothing froze it:
    the backward gave that zero (the real-fault benchmark's attention-pooling twin once got
    FROZEN_PARAMS_MOVE). Every step is a full statistics step, so each such move is seen."""
    torch.manual_seed(seed)
    model = _AttentionPool()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(32, 5, 4), torch.randint(0, 2, (32,))
    moved_at_zero = 0
    with NetworkDebugger(model, opt, every=1, full_every=1, warmup=0) as dbg:
        for _ in range(60):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            zero = float(model.score.bias.grad.abs().max()) == 0.0
            before = model.score.bias.detach().clone()
            opt.step()
            moved_at_zero += zero and not torch.equal(before, model.score.bias)
            dbg.record_loss(loss.item())
        assert moved_at_zero > 0                      # the premise: such moves happened
        assert dbg.diagnose() == []


def test_a_debugger_dropped_mid_step_is_freed_with_its_model_and_leaves_no_mode_behind():
    """Dropped between a statistics step's forward and its backward: the collector frees the
    debugger, the model and the optimizer (torch keeps post-accumulate-grad hooks where the
    collector cannot see them, so those hooks hold the debugger weakly), and the debugger's
    function mode leaves torch's stack with it."""
    import gc
    import weakref

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = len(torch.overrides._get_current_function_mode_stack())
    dbg = NetworkDebugger(model, opt)
    for _ in range(3):                  # statistics steps: the gradient hooks are attached
        opt.zero_grad()
        F.cross_entropy(model(torch.randn(4, 4)), torch.tensor([0, 1, 0, 1])).backward()
        opt.step()
    model(torch.randn(4, 4))            # a statistics step's forward, then nothing
    assert len(torch.overrides._get_current_function_mode_stack()) == before + 1
    gone = [weakref.ref(o) for o in (dbg, model, opt)]
    del dbg, model, opt
    gc.collect()
    assert [r() for r in gone] == [None, None, None]
    assert len(torch.overrides._get_current_function_mode_stack()) == before


def test_an_evaluation_pass_leaves_no_function_mode_behind():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    dbg = NetworkDebugger(model, torch.optim.SGD(model.parameters(), lr=0.1))
    before = len(torch.overrides._get_current_function_mode_stack())
    with torch.no_grad():
        model(torch.randn(4, 4))        # a statistics step's pass that no backward can follow
    assert len(torch.overrides._get_current_function_mode_stack()) == before
    dbg.close()


# -- functional code and torch.compile -------------------------------------------------------
class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.fc(x))


def test_functional_activations_are_named_after_their_module_and_seen_on_stats_steps_only():
    torch.manual_seed(0)
    model = nn.Sequential(Block(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = NetworkDebugger(model, opt, warmup=2, every=5)
    seen = []
    original = dbg._on_functional_activation
    dbg._on_functional_activation = lambda *a: (seen.append(dbg._step), original(*a))[1]
    train(model, opt, dbg, 12)
    assert "0/relu" in dbg.history[-1]["layers"]
    assert dbg._layer_kinds["0/relu"] == "F.relu"
    assert sorted(set(seen)) == [0, 1, 5, 10]                     # statistics steps only
    assert dbg._functional is None            # its mode was left after the step


@pytest.mark.parametrize("give", ["wrapper", "original"])
def test_compiled_model_trains_without_recompilation(give):
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = tiny()
    fast = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = NetworkDebugger(fast if give == "wrapper" else model, opt, warmup=3, every=10)
    train(fast, opt, dbg, 2)
    graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 1
    train(fast, opt, dbg, 40, start=2)            # statistics and plain steps, warm-up's end
    assert counters["stats"]["unique_graphs"] == graphs          # no recompilation
    assert not counters["recompiles"] if "recompiles" in counters else True
    assert dbg.errors == []
    assert sorted(dbg.history[-1]["params"]) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert dbg.history[-1]["params"]["0.weight"]["grad_norm"] > 0


@pytest.mark.parametrize("at", [20, 25])          # a statistics step, and a plain one
def test_compiling_after_attach_trains_without_recompilation(at):
    """torch.compile(model) after the debugger is attached: dynamo traces whatever module
    hooks are on the model at that step; the debugger notices the compiled forward (gradients
    but no eager forward) and leaves the module hooks as they were traced."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = NetworkDebugger(model, opt, warmup=3, every=10)
    train(model, opt, dbg, at)
    fast = torch.compile(model, backend="eager")
    train(fast, opt, dbg, 2, start=at)
    graphs = counters["stats"]["unique_graphs"]
    assert graphs == 1
    train(fast, opt, dbg, 40, start=at + 2)        # statistics steps and plain ones
    assert counters["stats"]["unique_graphs"] == graphs and not counters["recompiles"]
    assert dbg.errors == []
    last = dbg.history[-1]
    assert last["step"] == 60 and last["params"]["0.weight"]["grad_norm"] > 0
    dbg.remove_hooks()
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_ddp_after_attach_trains_and_is_watched(tmp_path):
    """DistributedDataParallel wrapped around the model after attaching (one gloo process)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        torch.manual_seed(0)
        model = tiny()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        dbg = NetworkDebugger(model, opt, warmup=3, every=10)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            train(model, opt, dbg, 20)
            ddp = DDP(model)
            train(ddp, opt, dbg, 40, start=20)
        assert dbg.errors == []
        last = dbg.history[-1]
        assert last["step"] == 50 and sorted(last["layers"]) == ["0", "1", "2"]
        assert last["params"]["0.weight"]["grad_norm"] > 0
        assert dbg.diagnose() == []
    finally:
        dist.destroy_process_group()


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = tiny()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.net(x)
        return out * self.temperature if hasattr(self, "temperature") else out


def test_new_parameter_added_after_attach_is_watched():
    torch.manual_seed(0)
    model = Scaled()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = NetworkDebugger(model, opt)

    def add() -> None:
        model.temperature = nn.Parameter(torch.ones(()))
        opt.add_param_group({"params": [model.temperature]})
    train(model, opt, dbg, 120, at={30: add})
    assert dbg.errors == []
    assert dbg.history[-1]["params"]["temperature"]["grad_norm"] > 0
    assert dbg.diagnose() == []


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_moving_the_model_to_another_dtype_keeps_training(dtype):
    torch.manual_seed(0)
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)   # Adam's state is float32
    dbg = NetworkDebugger(model, opt)
    train(model, opt, dbg, 220, at={60: lambda: model.to(dtype), 140: lambda: model.to("cpu")})
    assert dbg.errors == []
    last = dbg.history[-1]
    assert last["full"] and last["params"]["0.weight"]["update_ratio"] > 0
    assert math.isfinite(last["layers"]["1"]["act_mean"])


def test_the_function_mode_sees_the_models_calls_and_not_the_debuggers_own(monkeypatch):
    """On a full statistics step the module hooks, the loss inspector and the batch inspector
    measure with the function mode off the stack: the mode sees what the model and the loss
    call (linear, relu, cross_entropy), none of the statistics' own reductions, and the
    functional ReLU is still measured."""
    from lesson.debugger.functional import FunctionalWatch

    seen: list[str] = []
    original = FunctionalWatch.__torch_function__

    def counting(self, func, types, args=(), kwargs=None):
        seen.append(getattr(func, "__name__", str(func)))
        return original(self, func, types, args, kwargs)
    monkeypatch.setattr(FunctionalWatch, "__torch_function__", counting)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3)

        def forward(self, x):
            return self.fc2(F.relu(self.act(self.fc1(x))))

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = NetworkDebugger(model, opt, nn.CrossEntropyLoss(), every=1, warmup=0, full_every=1)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    opt.zero_grad()
    dbg.criterion(model(x), y).backward()
    opt.step()
    dbg.record_loss(1.0)
    assert {"linear", "relu", "tanh"} <= set(seen)
    assert not {"dot", "sum", "aminmax", "sign", "sub", "square_", "stack"} & set(seen), seen
    assert len(seen) < 20, seen
    assert "relu" in {name.rpartition("/")[2] for name in dbg.activation_stats}


def _hooked(model: nn.Module) -> int:
    """Parameters that carry a Python gradient hook now."""
    return sum(bool(p._backward_hooks) for p in model.parameters())


def test_between_statistics_steps_a_backward_runs_one_gradient_hook():
    """On statistics steps every parameter has its fresh-gradient hook; between them only the
    sentinel (the output layer's bias, whose gradient comes first), so a plain step's backward
    calls one Python hook whatever the model's size, and the bookkeeping stays whole: every
    backward counted, no tensor called unused."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                          nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    dbg = NetworkDebugger(model, opt)
    train(model, opt, dbg, 10)                       # the warm-up: statistics steps
    assert _hooked(model) == 1 and dbg._params[dbg._sentinel][0] == "4.bias"
    train(model, opt, dbg, 40, start=10)             # to the next statistics step (50)
    assert _hooked(model) == 6
    train(model, opt, dbg, 1, start=50)
    assert _hooked(model) == 1
    ev = dbg.evidence()
    assert ev.backwards == 51 and ev.never_grad == [] and dbg.diagnose() == []


def test_between_statistics_steps_the_model_and_optimizer_carry_two_hooks():
    """Between statistics steps the root module keeps its forward pre-hook only and the
    optimizer its post-step hook only (no global optimizer hook is left); the output checks,
    the pre-step measurements and the search for other optimizers come back for a statistics
    step, before its forward."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    dbg = NetworkDebugger(model, opt)
    from torch.optim.optimizer import _global_optimizer_pre_hooks as global_pre
    before = len(global_pre)
    train(model, opt, dbg, 12)                        # warm-up, then two plain steps
    assert len(model._forward_pre_hooks) == 1 and not model._forward_hooks
    assert not opt._optimizer_step_pre_hooks and len(opt._optimizer_step_post_hooks) == 1
    assert len(global_pre) == before - 1              # ours is gone, nobody else's
    train(model, opt, dbg, 38, start=12)              # the next step (50) is a statistics step
    assert len(model._forward_hooks) == 1 and all(m._forward_hooks for m in model)
    assert len(opt._optimizer_step_pre_hooks) == 1 and len(global_pre) == before
    train(model, opt, dbg, 10, start=50)
    assert dbg.diagnose() == [] and dbg.errors == []
    dbg.close()
    assert len(global_pre) == before - 1 and not opt._optimizer_step_pre_hooks


def test_between_statistics_steps_autograd_calls_no_python_for_unhooked_parameters():
    """A tensor whose hooks were all removed keeps an empty hook table, and autograd calls
    into Python for it at every backward all the same: the debugger drops the tables it
    emptied (all but the sentinel's), and leaves a table with the user's own hook in it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    seen = []
    model[0].weight.register_hook(lambda g: seen.append(1))
    dbg = NetworkDebugger(model, opt)
    train(model, opt, dbg, 12)                        # warm-up, then two plain steps
    params = list(model.parameters())
    sentinel = dbg._params[dbg._sentinel][1]
    assert all(p._post_accumulate_grad_hooks is None for p in params)
    assert [p._backward_hooks is None for p in params if p is not sentinel] \
        == [False, True, True]                        # only the user's weight keeps a table
    assert len(model[0].weight._backward_hooks) == 1 and len(sentinel._backward_hooks) == 1
    train(model, opt, dbg, 38, start=12)              # statistics step 50: every table again
    assert all(p._post_accumulate_grad_hooks for p in params)
    train(model, opt, dbg, 10, start=50)
    assert len(seen) == 60 and dbg.errors == [] and dbg.history[-1]["step"] == 50
    dbg.close()
    assert [p._backward_hooks is None for p in params] == [False, True, True, True]
    assert all(p._post_accumulate_grad_hooks is None for p in params)


def test_a_second_optimizer_that_steps_after_ours_is_seen():
    """The global optimizer hooks come only with statistics steps. A second optimizer that
    steps after the debugger's own in the loop steps in the debugger's next step, which they
    are attached for when it is a statistics step: one that starts after the warm-up is found
    all the same, and its tensors are not called unstepped."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    ours = torch.optim.SGD(model[0].parameters(), lr=0.05)
    other = torch.optim.SGD(model[2].parameters(), lr=0.05)
    dbg = NetworkDebugger(model, ours)
    g = torch.Generator().manual_seed(0)
    for step in range(120):
        x, y = torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)
        ours.zero_grad()
        other.zero_grad()
        F.cross_entropy(model(x), y).backward()
        ours.step()
        if step >= 30:                                # the head's optimizer joins late
            other.step()
    assert other in dbg._seen_optimizers
    assert "PARAMS_NOT_UPDATED" not in [f.code for f in dbg.diagnose()]


def test_a_head_trained_on_some_steps_only_leaves_every_parameter_hooked():
    """Two heads trained on alternate steps: the sentinel (one head's bias) misses every other
    backward, so the debugger hooks every parameter from then on. No backward goes uncounted
    and neither head is called unused or left without gradient."""
    torch.manual_seed(0)
    body, heads = nn.Linear(4, 16), nn.ModuleList([nn.Linear(16, 2), nn.Linear(16, 2)])

    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body, self.heads, self.which = body, heads, 0

        def forward(self, x):
            return self.heads[self.which](F.relu(self.body(x)))

    model = TwoHeads()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    dbg = NetworkDebugger(model, opt)
    g = torch.Generator().manual_seed(0)
    for step in range(120):
        model.which = step % 2
        x, y = torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        dbg.record_loss(loss.detach())
    assert dbg._sentinel is None and _hooked(model) == 6
    ev = dbg.evidence()
    assert ev.backwards == 120 and ev.never_grad == []
    assert not {"NO_GRADIENT", "TRAIN_MODE_DURING_EVAL", "EVAL_MODE_DURING_TRAINING"} & {
        f.code for f in dbg.diagnose()}


def test_a_frozen_layer_moved_by_a_missing_zero_grad_is_named_its_consequence():
    """Without zero_grad() a layer frozen mid-run keeps its last gradient, and the optimizer
    goes on applying it: the layer moves (the symptom), FROZEN_PARAMS_MOVE says so, and the
    report puts the cause first, MISSING_ZERO_GRAD, with the move linked to it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    dbg = NetworkDebugger(model, opt)
    g = torch.Generator().manual_seed(0)
    for step in range(300):
        if step == 100:
            model[0].requires_grad_(False)
            frozen = model[0].weight.detach().clone()
        x, y = torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)
        loss = F.cross_entropy(model(x), y)
        loss.backward()                               # no zero_grad() anywhere
        opt.step()
        dbg.record_loss(loss.detach())
    assert not torch.equal(model[0].weight, frozen)   # "frozen", and it moved
    findings = dbg.diagnose()
    codes = [f.code for f in findings]
    assert codes[0] == "MISSING_ZERO_GRAD" and "FROZEN_PARAMS_MOVE" in codes
    moved = next(f for f in findings if f.code == "FROZEN_PARAMS_MOVE")
    assert moved.explained_by == "MISSING_ZERO_GRAD" and dbg.errors == []
