"""The machinery that keeps `NetworkDebugger` cheap: hook scheduling, batched transfers, buffers.

`lesson.debugger.monitor` says what the debugger measures, when, and how it decides. This module
holds what it takes to do that without slowing the user's training:

* **hooks that come and go**: between statistics steps three Python hooks run per step: the
  root module's forward pre-hook, the optimizer's post-step hook, and one fresh-gradient hook,
  the sentinel's (see NetworkDebugger._set_fresh_hooks). Everything else (the measuring hooks
  on every watched module and accumulated gradient, the root's output hook, the optimizer's
  pre-step hook, the global optimizer hooks) is attached for a statistics step and removed
  after it, so between statistics steps `nn.Module` takes its fast path below the root, and
  autograd calls no Python for the other parameters (remove_tensor_hooks);
* **one buffer per step**: every statistic of a step is a reducible accumulator in one
  `StepBuffer`, copied to the host in one transfer (or 16 light records at a time, RECORD_BATCH),
  then decoded into a plain-Python record;
* **kept copies** of the parameters for the update/weight ratios on the CPU;
* **records**: a bounded history, handed to callbacks (sinks and alerts) as they are made.

`Engine` is the base class of `NetworkDebugger`; it reads the schedule (`_scheduled`, `_full`),
the watched parameters and layers, and the optimizer from the debugger.
"""
from __future__ import annotations

import math
import warnings
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                   register_optimizer_step_pre_hook)
from torch.utils.hooks import RemovableHandle

from lesson.debugger.distributed import RankReducer, world_size
from lesson.debugger.functional import inside_transform
from lesson.debugger.stats import (ACT_FULL_MAXES, ACT_FULL_SUMS, GRAD_FULL_MAXES, GRAD_FULL_SUMS,
                                   StepBuffer, gradient_norm, identity_reduce,
                                   pooled_sample_std, squared_norms)
from lesson.production.alerts import TrainingAlert
from lesson.production.sinks import SinkLogger, model_tensors

RECORD_BATCH = 16
"""Light records that nothing listens to as they are made (no sink, alert or callback) are
copied to the host 16 at a time: one transfer, and on an accelerator one sync, per 16
statistics steps instead of one per step, which is most of what every=1 would cost otherwise.
Reading any result (history, snapshot, diagnose, the lesson's views) copies what is pending."""
DEFAULT_MAX_HISTORY = 2000
"""Records kept; beyond that every other one is dropped (first and last kept), so a long run
keeps its whole shape in bounded memory."""
MAX_ERRORS = 20
"""Internal errors kept in `errors` (a statistic that failed never breaks the user's training)."""


def remove_tensor_hooks(handles: Sequence[RemovableHandle], tensors: Sequence[torch.Tensor]
                        ) -> None:
    """Remove hooks from tensors, and drop a tensor's hook table once it is empty again.

    Autograd calls into Python for a tensor that has a hook table, empty or not: it takes the
    GIL back and wraps the gradient in a Python tensor, for every such parameter at every
    backward (two tables per parameter; a 7-parameter MLP's step, 2.7 us). A table that still
    holds the user's own hooks is left as it is."""
    for handle in handles:
        handle.remove()
    for t in tensors:
        if t._backward_hooks is not None and not t._backward_hooks:
            t._backward_hooks = None
        if t._post_accumulate_grad_hooks is not None and not t._post_accumulate_grad_hooks:
            t._post_accumulate_grad_hooks = None


def lr_of(optimizer: torch.optim.Optimizer) -> float | None:
    """The first parameter group's learning rate, or None."""
    if not optimizer.param_groups:
        return None
    lr = optimizer.param_groups[0].get("lr")
    return float(lr) if lr is not None else None


class _WatchedLoss:
    """A plain loss function wrapped so the debugger sees what goes into it."""

    def __init__(self, fn: Callable[..., Any], debugger: "Engine") -> None:
        self.fn = fn
        self._debugger = weakref.ref(debugger)
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__wrapped__ = fn

    def __call__(self, output: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        debugger = self._debugger()
        if debugger is not None:
            debugger._observe_loss_inputs(output, target, self.fn)
        return self.fn(output, target, *args, **kwargs)


class Engine:
    """Hooks, buffers and records for `NetworkDebugger` (its base class; see the module doc)."""

    # provided by the debugger
    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    every: int
    log_every: int | None
    loss_history_raw: list[float | torch.Tensor]
    hooks: list[RemovableHandle]
    _step: int
    _params: list[tuple[str, nn.Parameter]]
    _param_keys: list[tuple[str, list[tuple[str, str]], dict[str, Any]]]
    _layer_kinds: dict[str, str]
    _relu_layers: set[str]
    _compiled: bool

    def _init_engine(self, max_history: int) -> None:
        self.max_history = max_history
        self.errors: list[str] = []
        self._history: list[dict[str, Any]] = []
        #: light records not yet copied to the host: (step, buffer, loss index, lr)
        self._deferred: list[tuple[int, StepBuffer, int | None, float | None]] = []
        self._callbacks: list[Callable[[dict[str, Any]], None]] = []
        self._reduce = identity_reduce
        self._closed_step = -1                 # last step whose record is written
        self._buf = StepBuffer()
        self._loss_pending: list[int] = []     # indices of loss_history_raw still on device
        self._loss_mark = 0                    # len(loss_history_raw) at the last record
        #: full steps, before the optimizer step: names, tensors, their copies, grad norms^2
        self._before: tuple[list[str], list[torch.Tensor], list[torch.Tensor],
                            list[torch.Tensor]] | None = None
        self._update_copies: dict[str, torch.Tensor] = {}   # see _keep_copies
        self._weight_norms: dict[str, float] = {}   # last measured, per parameter
        #: (module or parameter, hook): attached on statistics steps only (_attach_step_hooks)
        self._step_hooks: list[tuple[nn.Module, Callable[..., None]]] = []
        self._param_step_hooks: list[tuple[nn.Parameter, Callable[..., None]]] = []
        self._stack_step_hooks: list[tuple[nn.Module, tuple[Callable[..., None],
                                                            Callable[..., None]]]] = []
        self._removed = False
        #: True while the debugger runs the model itself (the sequence probes): hooks stand by
        self._probing = False
        self._attached_modules: list[RemovableHandle] = []   # see _attach_step_hooks
        self._attached_params: list[RemovableHandle] = []
        self._pinned = False
        self._samples: dict[str, torch.Tensor] = {}
        self._explicit_optimizer = self.optimizer is not None
        self._step_pre_handle: RemovableHandle | None = None   # see _toggle_step_pre_hook
        self._step_pre_hook: Callable[..., None] | None = None
        self._root_output_hook: Callable[..., None] | None = None
        self._seen_optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()

    # -- hooks --------------------------------------------------------------------------------
    def _watch_criterion(self, criterion: Callable[..., Any]) -> None:
        if isinstance(criterion, nn.Module):
            def pre(module: nn.Module, args: tuple[Any, ...]) -> None:
                if len(args) >= 2:
                    self._observe_loss_inputs(args[0], args[1], module)
            self.hooks.append(criterion.register_forward_pre_hook(self._guarded("loss", pre)))
        else:
            self.criterion = _WatchedLoss(criterion, self)

    def _attach_step_hooks(self, on: bool, *, force: bool = False) -> None:
        """Attach the measuring hooks (module outputs, accumulated gradients) for a statistics
        step, detach them after it: between statistics steps the watched modules have no hook
        at all, so nn.Module takes its fast call path, and autograd calls no Python after
        accumulating a gradient.

        Once the model is found running compiled inside the debugger's back (`_pinned`: wrapped
        in torch.compile after attaching, see NetworkDebugger._advance), module hooks stay as
        they are, attached or not: dynamo traced the model with them, and adding or removing
        one would switch its graph. Only `force` (the watched set is rebuilt) changes them."""
        modules_fixed = self._pinned and not force
        if on and self.hooks:
            if not self._attached_modules and not self._compiled and not modules_fixed:
                # inside a compiled model a module hook would be traced (as a no-op, see
                # _guarded), and coming and going it would switch dynamo's graphs: none there
                handles = [m.register_forward_hook(self._guarded("forward", h))
                           for m, h in self._step_hooks]
                for m, (push, pop) in self._stack_step_hooks:
                    handles.append(m.register_forward_pre_hook(push))   # modules running now
                    handles.append(m.register_forward_hook(pop))
                handles.append(self._root.register_forward_hook(self._root_output_hook,
                                                                with_kwargs=True))
                self._attached_modules = handles
            # across ranks the optimizer's pre-step hook measures DDP's averaged gradients
            by_step = self.reducer is not None and self.optimizer is not None
            if not self._attached_params and not by_step:
                self._attached_params = [
                    p.register_post_accumulate_grad_hook(self._weak_param_hook(i))
                    for i, (p, _) in enumerate(self._param_step_hooks) if p.requires_grad]
        elif not on:
            if self._attached_params:
                remove_tensor_hooks(self._attached_params, [p for p, _ in self._param_step_hooks])
                self._attached_params = []
            if self._attached_modules and not modules_fixed:
                for handle in self._attached_modules:
                    handle.remove()
                self._attached_modules = []

    def _weak_param_hook(self, i: int) -> Callable[[torch.Tensor], None]:
        """The i-th post-accumulate-grad hook, holding the debugger weakly: torch keeps such
        hooks from C++ where the garbage collector cannot see them, so a strong reference
        would keep a dropped debugger, its model and its optimizer alive for good."""
        me = weakref.ref(self)

        def hook(p: torch.Tensor) -> None:
            debugger = me()
            if debugger is None:
                return
            hooks = debugger._param_step_hooks       # (parameter, guarded hook)
            if i < len(hooks) and hooks[i][0] is p:
                hooks[i][1](p)
        return hook

    def _error(self, where: str, exc: Exception) -> None:
        """Keep an internal error in `errors`; the first one also warns (once per debugger)."""
        message = f"{where}: {type(exc).__name__}: {exc}"
        if not self.errors:
            warnings.warn(f"NetworkDebugger: an internal error was caught and kept in "
                          f"debugger.errors (training goes on): {message}", RuntimeWarning,
                          stacklevel=3)
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(message)

    def _guarded(self, where: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` as a hook that never raises into the user's forward, backward or step: an
        internal error goes to `errors`. A TrainingAlert (policy "raise") is meant to stop
        the run and goes through. While torch.compile traces the model, a hook does nothing:
        reading the debugger's step counter there would make dynamo guard on it and recompile
        at every statistics step. A forward or loss hook does nothing inside a torch.func
        transform either (see `inside_transform`); the optimizer's and the gradients' hooks
        never run there, and skip the check (a call between statistics steps costs a few
        microseconds)."""
        passes = where in ("forward", "loss")

        def hook(*args: Any, **kwargs: Any) -> Any:
            if self._probing or torch.compiler.is_compiling() \
                    or (passes and inside_transform()):
                return None
            try:
                fn(*args, **kwargs)
            except TrainingAlert:
                raise
            except Exception as exc:
                self._error(where, exc)
            return None
        return hook


    # -- optimizers: adopting one, tensors none steps, parameter copies ----------------
    def _watch_optimizers(self) -> None:
        """See every optimizer that steps our parameters: the one to adopt when none was passed,
        and the others (a GAN's second optimizer, say), so their tensors count as stepped."""
        me = weakref.ref(self)     # a global hook must not keep a forgotten debugger alive

        def pre(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            if (debugger := me()) is not None:
                debugger._on_any_step_pre(opt, args, kwargs)

        def post(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            if (debugger := me()) is not None:
                debugger._on_any_step_post(opt, args, kwargs)
        self._global_step_hooks = (pre, post)
        self._global_handles: list[RemovableHandle] = []
        self._toggle_global_hooks(True)

    def _toggle_global_hooks(self, on: bool) -> None:
        """Attach (on) or detach the global optimizer hooks. With an optimizer passed in they
        only discover the others, whose steps the statistics steps judge: they are attached
        for statistics steps (from the end of the step before, so a second optimizer that steps
        after ours in the loop is seen too), and the warm-up sees one that steps now and then.
        Without one they find it and then drive the step bookkeeping: always attached."""
        on = on or not self._explicit_optimizer
        if on and not self._global_handles and not self._removed:
            pre, post = self._global_step_hooks
            self._global_handles = [register_optimizer_step_pre_hook(pre),
                                    register_optimizer_step_post_hook(post)]
        elif not on and self._global_handles:
            for handle in self._global_handles:
                handle.remove()
            self._global_handles = []

    def _toggle_step_pre_hook(self, on: bool) -> None:
        """The optimizer's own pre-step hook, attached for statistics steps only: a plain
        step's bookkeeping needs only the post-step hook."""
        handle = self._step_pre_handle
        if on and handle is None and self.optimizer is not None and self._explicit_optimizer:
            self._step_pre_handle = self.optimizer.register_step_pre_hook(self._step_pre_hook)
        elif not on and handle is not None:
            handle.remove()
            self._step_pre_handle = None

    def _holds(self, optimizer: torch.optim.Optimizer) -> set[int]:
        return {id(p) for g in optimizer.param_groups for p in g["params"]}

    def _on_any_step_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if optimizer is self.optimizer and self._explicit_optimizer:
            return                      # its own hook (registered on it) does the work
        if optimizer not in self._seen_optimizers:
            mine = {id(p) for _, p in self._params}
            if not mine & self._holds(optimizer):
                return
            self._seen_optimizers.add(optimizer)
            if self.optimizer is None:
                self.optimizer = optimizer
        if optimizer is self.optimizer and not self._explicit_optimizer:
            self._on_step_pre(optimizer, args, kwargs)

    def _on_any_step_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if optimizer is self.optimizer and not self._explicit_optimizer:
            self._on_step_post(optimizer, args, kwargs)

    def _unstepped_tensors(self) -> dict[str, int]:
        """Tensors that got gradients no optimizer applied, with the number of steps."""
        held: set[int] = set()
        for opt in list(self._seen_optimizers) + [self.optimizer]:
            if opt is not None:
                held |= self._holds(opt)
        params = dict(self._params)
        not_held = {n: c for n, c in self._not_held.items()
                    if n in params and id(params[n]) not in held}
        foreign = {k: c for k, c in self._foreign_unstepped.items()}
        return self._unstepped | not_held | foreign

    def _measure_weights_before_step(self, held: set[int]) -> None:
        """Full steps: weight norms, a copy of each stepped tensor for its update ratio, and
        the squared norm of the gradient the step will see (zero if the loop zero-filled it
        after the backward, `p.grad.zero_()`: a "frozen" tensor that the step still moves)."""
        try:
            stepped = [(n, p) for n, p in self._params if id(p) in held and p.grad is not None]
            names = [n for n, _ in stepped]
            tensors = [p.detach() for _, p in stepped]
            if not tensors:
                return
            for name, sq in zip(names, squared_norms(tensors)):
                self._buf.set_sum(("weight", name), sq.reshape(1))
            grads = [gradient_norm(p.grad) for _, p in stepped]     # sparse ones too
            self._before = (names, tensors, self._copies(names, tensors), grads)
        except Exception as exc:
            self._error("optimizer step", exc)

    def _measure_updates(self) -> None:
        """After the step: the squared norm of each update, from the copies taken before it."""
        if self._before is None:
            return
        names, tensors, before, grads = self._before
        self._before = None
        try:
            torch._foreach_sub_(before, tensors)
            for name, sq, grad in zip(names, squared_norms(before), grads):
                self._buf.set_sum(("update", name), sq.reshape(1))
                # the update of a tensor whose gradient was all zero at the step (0 otherwise)
                self._buf.set_sum(("zeroed", name), torch.where(grad == 0, sq, 0).reshape(1))
            if not self._keep_copies(tensors):
                self._update_copies = {}
        except Exception as exc:
            self._error("optimizer step", exc)

    def _keep_copies(self, tensors: list[torch.Tensor]) -> bool:
        """Parameter copies are kept between full steps on the CPU, where allocating them
        afresh costs more page faults than the copy itself (one copy of the parameters, the
        memory the update ratios need anyway); elsewhere the caching allocator recycles them."""
        return all(t.device.type == "cpu" for t in tensors)

    def _copies(self, names: list[str], tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Copies of `tensors` (the parameters before the step), into kept buffers if any."""
        if not self._keep_copies(tensors):
            return [t.clone() for t in tensors]
        kept = self._update_copies
        bufs = []
        for name, t in zip(names, tensors):
            buf = kept.get(name)
            if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
                buf = kept[name] = torch.empty_like(t, memory_format=torch.contiguous_format)
            bufs.append(buf)
        torch._foreach_copy_(bufs, tensors)
        return bufs


    # -- records: one buffer per step, copied in batches, decoded, kept ----------------
    def _close(self) -> None:
        buf, self._buf = self._buf, StepBuffer()
        step, self._closed_step = self._step, self._step
        full = self._full(step)
        if full and self._params and not any(k[0] == "weight" for k in buf.sums):
            for (name, _), sq in zip(self._params, squared_norms([p for _, p in self._params])):
                buf.set_sum(("weight", name), sq.reshape(1))
        raw = self.loss_history_raw
        loss_index = len(raw) - 1 if len(raw) > self._loss_mark else None
        self._loss_mark = len(raw)
        if self.reducer is None and not self._callbacks and not full and buf:
            self._deferred.append((step, buf, loss_index, self._current_lr()))
            if len(self._deferred) >= RECORD_BATCH:
                self._write_deferred()
            return
        self._write_deferred()
        pending = self._loss_pending
        if pending:
            ts = [raw[i] for i in pending]
            dev = ts[0].device  # type: ignore[union-attr]
            buf.set_value(("losses",), torch.stack(  # 0-dim each (see record_loss)
                [t if t.device == dev else t.to(dev) for t in ts]))  # type: ignore[union-attr]
        had_data = bool(buf)
        try:
            host = buf.gather(self._reduce, step=step)
        except Exception as exc:    # a statistic that cannot be read: the record is lost
            self._error(f"record of step {step}", exc)
            return
        if not had_data and not host["sums"]:
            return                               # a rank with nothing, and nothing merged
        if self.reducer is not None and self.reducer.last_skipped:
            self._error(f"step {step}", RuntimeError(self.reducer.skipped[-1][1]))
        if pending:
            for i, v in zip(pending, host["values"][("losses",)].tolist()):
                raw[i] = v
            self._loss_pending = []
        record = self._decode(step, host, self._current_lr())
        record["loss"] = float(raw[loss_index]) if loss_index is not None else None
        self._append(record)

    def _write_deferred(self) -> None:
        """Copy the deferred light records to the host (one transfer) and write them."""
        entries, self._deferred = self._deferred, []
        if not entries:
            return
        try:
            hosts = StepBuffer.gather_many([buf for _, buf, _, _ in entries])
        except Exception:           # one unreadable record must not take the others along
            hosts = []
            for step, buf, _, _ in entries:
                try:
                    hosts.extend(StepBuffer.gather_many([buf]))
                except Exception as exc:
                    self._error(f"record of step {step}", exc)
                    hosts.append(None)
        self._resolve_losses()
        raw = self.loss_history_raw
        for (step, _, loss_index, lr), host in zip(entries, hosts):
            if host is None:
                continue
            record = self._decode(step, host, lr)
            record["loss"] = float(raw[loss_index]) if loss_index is not None else None
            self._append(record)

    def _append(self, record: dict[str, Any]) -> None:
        """Keep `record` (thinning a long history, first and last kept) and hand it on."""
        history = self._history
        history.append(record)
        if len(history) > self.max_history:
            history[:] = history[:1] + history[2:-1:2] + history[-1:]
        try:
            for fn in list(self._callbacks):
                fn(record)
        finally:
            self._samples = {}

    def _decode(self, step: int, host: dict[str, dict[Any, np.ndarray]], lr: float | None
                ) -> dict[str, Any]:
        sums, maxes = host["sums"], host["maxes"]
        layers: dict[str, dict[str, Any]] = {}
        with np.errstate(all="ignore"):         # NaN/Inf are counted, not warned about
            for key, sq in sums.items():
                if key[0] == "act":
                    layers[key[1]] = self._layer_record(key[1], float(sq[0]), host)
        params: dict[str, dict[str, Any]] = {}
        zero_moves: list[tuple[str, float]] = []
        for name, keys, static in self._param_keys:
            g, w, u, st = map(sums.get, keys)
            if w is not None:        # measured on full steps; light records repeat the last
                self._weight_norms[name] = math.sqrt(w[0])
            weight_norm = self._weight_norms.get(name, math.nan)
            entry: dict[str, Any] = {
                "grad_norm": None, "weight_norm": weight_norm, "update_ratio": None,
                "nonfinite_grad": 0, **static,
                "stale_grad_norm": math.sqrt(st[0]) if st is not None else None}
            if g is not None:
                grad_sq = float(g[0])
                entry["grad_norm"] = math.sqrt(grad_sq)
                entry["nonfinite_grad"] = int(not math.isfinite(grad_sq))
                full = sums.get(("grad_full", name))
                if full is not None:
                    numel = static["numel"]
                    gs = dict(zip(GRAD_FULL_SUMS, full.tolist()))
                    gm = dict(zip(GRAD_FULL_MAXES, maxes[("grad_full", name)].tolist()))
                    entry.update(grad_abs_mean=gs["abs_sum"] / numel, grad_mean=gs["sum"] / numel,
                                 grad_max=gm["abs_max"])
            if u is not None:
                entry["update_norm"] = math.sqrt(u[0])
                if weight_norm > 0:
                    entry["update_ratio"] = entry["update_norm"] / weight_norm
            zeroed = sums.get(("zeroed", name))
            # zero at the step, though the backward gave it a gradient (or none at all): the
            # loop zero-filled it. A gradient that autograd itself made exactly zero (a bias
            # that a softmax cancels) is no freezing.
            if zeroed is not None and zeroed[0] > 0 and weight_norm > 0 \
                    and (g is None or g[0] > 0):
                zero_moves.append((name, math.sqrt(zeroed[0]) / weight_norm))
            params[name] = entry
        # A tensor is "frozen" by a zero-filled gradient only while others learn: when every
        # gradient is zero (a dead output unit blocks them all), the step's drift is momentum
        # over a network without signal, which other codes name.
        if any(e["grad_norm"] for e in params.values()):
            for name, move in zero_moves:
                self._moved_with_zero_grad(name, move)
        return {"step": step, "loss": None, "lr": lr, "full": self._full(step),
                "layers": layers, "params": params}

    def _layer_record(self, name: str, sumsq: float, host: dict[str, dict[Any, np.ndarray]]
                      ) -> dict[str, Any]:
        """One layer's activation statistics from its light (and, if taken, full) sums."""
        sums, maxes = host["sums"], host["maxes"]
        units = sums[("act_units", name)]
        count, calls, samples = host["counts"][("act", name)].tolist()
        total = float(np.add.reduce(units))
        mean = total / count
        var = sumsq / count - mean * mean
        nonfinite = 0
        if not (math.isfinite(total) and math.isfinite(sumsq)):
            nonfinite = max(int(np.count_nonzero(~np.isfinite(units))), 1)
        record: dict[str, Any] = {
            "kind": self._layer_kinds.get(name, "?"),
            "act_mean": mean,
            "act_std": math.sqrt(var) if var > 0 else (var if math.isnan(var) else 0.0),
            "act_min": None, "act_max": None, "zero_fraction": None,
            "dead_fraction": (float(np.count_nonzero(units == 0)) / units.size
                              if name in self._relu_layers else None),
            "sample_std": None, "nonfinite": nonfinite, "samples": int(samples / calls),
        }
        full = sums.get(("act_full", name))
        if full is not None:
            a = dict(zip(ACT_FULL_SUMS, full.tolist()))
            m = dict(zip(ACT_FULL_MAXES, maxes[("act_full", name)].tolist()))
            record.update(
                act_min=-m["neg_min"], act_max=m["max"],
                zero_fraction=(count - a["nonzero"]) / count,
                sample_std=(pooled_sample_std(sums[("act_el", name)].tolist(), samples)
                            if ("act_el", name) in sums else a["sample_std"] / calls))
        return record

    def _moved_with_zero_grad(self, name: str, move: float) -> None:
        """A tensor whose gradient was all zero at the optimizer step moved by `move` (relative
        to its norm): provided by the debugger, which keeps that evidence."""

    def _current_lr(self) -> float | None:
        return lr_of(self.optimizer) if self.optimizer is not None else None

    def _flush(self) -> None:
        """Write the record of a statistics step still in progress (before reading results)."""
        if self._buf and self._is_stats_step() and self.reducer is None:
            self._close()   # across ranks a record is closed only where every rank closes it

    @property
    def history(self) -> list[dict[str, Any]]:
        """One record per statistics step, oldest first (see the module docstring)."""
        self._write_deferred()
        return self._history

    def snapshot(self) -> dict[str, Any] | None:
        """The latest record (None before the first statistics step)."""
        self._flush()
        return self.history[-1] if self.history else None

    def add_callback(self, fn: Callable[[dict[str, Any]], None]) -> None:
        """Call `fn(record)` with every new record (sinks, alerts, plots hang here)."""
        if not callable(fn):
            raise TypeError(f"callback must be callable, got {type(fn).__name__}")
        self._write_deferred()          # records from before it was added are not its
        self._callbacks.append(fn)

    def _resolve_losses(self) -> None:
        """Copy the losses still on the device to the host, in one transfer."""
        if self._loss_pending:
            ts = [self.loss_history_raw[i] for i in self._loss_pending]
            try:
                stacked = torch.stack(ts)      # type: ignore[arg-type]
            except RuntimeError:    # losses from several devices: one by one
                dev = ts[0].device             # type: ignore[union-attr]
                stacked = torch.stack([t.to(dev, torch.float64) for t in ts])  # type: ignore
            values = stacked.to(torch.float64).tolist()
            for i, v in zip(self._loss_pending, values):
                self.loss_history_raw[i] = v
            self._loss_pending = []


    # -- production: sinks, alerts, several processes ----------------------------------
    def _setup_production(self, sinks: Sequence[Any], alerts: Sequence[Any],
                          activation_sample: int, distributed: bool | None) -> None:
        if distributed is None:
            distributed = world_size() > 1
        #: merges the statistics of every rank; pass it to torch.distributed's Join with the
        #: DDP model when ranks may run out of data at different steps
        self.reducer = RankReducer(is_stats_step=self._scheduled) if distributed else None
        if self.reducer is not None:
            self._reduce = self.reducer
        self.is_main = self.reducer is None or self.reducer.rank == 0
        self.activation_sample = activation_sample
        self._samples: dict[str, torch.Tensor] = {}
        self._logger = SinkLogger(sinks, self.log_every or self.every,
                                  tensors=lambda: model_tensors(self.model, self._samples)
                                  ) if sinks else None
        if self._logger is not None and self.is_main:      # sinks write on rank 0 only
            self.add_callback(self._logger)
        self.alerts = list(alerts)
        for alert in self.alerts:
            alert.bind(self)
            # every rank sees the same merged record: all of them raise at the same step
            if self.is_main or alert.policy == "raise":
                self.add_callback(alert)

    def _keeps_samples(self) -> bool:
        return (self._logger is not None and self.is_main and self._logger.wants_histograms
                and self._logger.is_log_step(self._step))
