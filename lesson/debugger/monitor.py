"""NetworkDebugger: watch a model while it trains, then say what is wrong with it.

The lesson's API is kept word for word (`activation_stats`, `gradient_stats`, `loss_history`,
`hooks`, `record_loss`, `check_loss_health`, `check_activations`, `check_gradients`,
`print_report`, `remove_hooks`), but the measurements behind it are new:

* hooks on every activation module (ReLU family, Sigmoid, Tanh, GELU, SiLU, Softmax, ...) and
  on Linear, Conv, recurrent and attention outputs launch a few reductions on the tensor's own
  device and keep no reference to it;
* gradients are read from the parameters (`.grad` after each backward), never from module
  outputs, so no full backward hook and no warning;
* an optimizer (passed in, or found when it steps the model's parameters) lets the debugger
  measure update/weight ratios and catch gradient bookkeeping bugs (missing `zero_grad()`,
  parameters that no optimizer steps);
* statistics are taken on "statistics steps" only (the first `warmup` steps, then every
  `every` steps) and copied to the host as one flat buffer per step;
* sequence models get their own checks (`lesson.debugger.sequences`): the root's inputs, the
  loss calls, attention and reads of one position are handed to `self.sequences` on
  statistics steps, and at the end of the first one it runs its causality and batch probes.

Statistics steps come in two weights. Every one takes the light statistics, the ones a rule
needs to catch an event at the step it happens: per-unit activation sums and sums of squares
(mean, std, dead units, NaN/Inf), gradient norms, the loss. The warm-up steps, log steps and
one statistics step in `full_every` steps add the full ones, which describe states that
persist or drift slowly (a collapsed layer, a softmax fed to the loss, unnormalised inputs):
activation min/max, zero fraction and across-batch spread, the gradients' mean and max, weight
norms (a light record repeats the last one measured) and update/weight ratios (a copy of every
parameter), and the loss-input and batch inspections.

`diagnose()` turns the gathered evidence into `Finding`s (see `lesson.debugger.rules`). A record of
every statistics step is kept in `history`; `add_callback(fn)` hands each new record to sinks
and alerts as it is made.

This file says what is measured, when, and how it is judged. What keeps it cheap (hooks that
are attached only for statistics steps, one buffer per step copied in batches, kept parameter
copies, the record history) is the base class in `lesson.debugger.engine`.
"""
from __future__ import annotations

import math
import warnings
import weakref
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.nn.utils import parametrize
from torch.utils.hooks import RemovableHandle

from lesson.debugger import rules
from lesson.debugger.batches import BatchInspector
from lesson.debugger.distributed import compiled_inner, is_compiled, unwrap
from lesson.debugger.engine import DEFAULT_MAX_HISTORY, Engine, remove_tensor_hooks
from lesson.debugger.functional import (HOOKED_ELSEWHERE, FunctionalWatch,
                                       function_mode_on_top, leave_stale_modes, outside)
from lesson.debugger.loss_inputs import LossInputInspector
from lesson.debugger.sequences import WATCHED_CALLS, SequenceWatch
from lesson.debugger.stochastic import EvalDeterminismProbe
from lesson.debugger.stats import (RELU_FAMILY, activation_details, activation_summary,
                                   element_sums, first_tensor, gradient_details, gradient_norm,
                                   graph_leaves, symmetric_layers)
from lesson.findings import Finding, layer_of, sort_findings
from lesson.production.sinks import sample_values
from lesson.restore import require_module

DEFAULT_EVERY = 50
"""Statistics every 50 steps after the warm-up (see benchmarks/bench_monitor_overhead.py for
what that costs, and what every=1 costs). The checks that need every batch do not wait for
statistics steps: losses are all recorded, and the targets' class order is watched on every
training step."""
DEFAULT_FULL_EVERY = 200
"""Steps between full statistics steps (see the module docstring): at every=200 and above every
statistics step is a full one; at the default every=50, one in four; at every=1, one in 200.
What the full statistics describe persists or drifts slowly, and the warm-up takes them at every
step, so a full record every 200 steps is enough; it is most of what statistics steps cost."""
DEFAULT_WARMUP = 10
"""The first steps are always measured: short runs (the lesson's demo trains 20 to 50 steps)
and early failures (lr too high, dead init) show there."""


def _activation_classes() -> tuple[type[nn.Module], ...]:
    """Every activation module torch defines (nn.modules.activation), MultiheadAttention aside."""
    mod = nn.modules.activation
    found = [obj for name in dir(mod) if isinstance(obj := getattr(mod, name), type)
             and issubclass(obj, nn.Module) and obj is not nn.Module
             and obj.__module__ == mod.__name__ and obj is not nn.MultiheadAttention]
    return tuple(found)


ACTIVATIONS = _activation_classes()
LAYERS: tuple[type[nn.Module], ...] = (
    nn.Linear, nn.Bilinear, nn.modules.conv._ConvNd, nn.RNNBase, nn.MultiheadAttention)
#: Leaf modules whose output is their input (or a reshaped/masked copy): nothing new to measure.
PASS_THROUGH: tuple[type[nn.Module], ...] = (
    nn.modules.dropout._DropoutNd, nn.Identity, nn.Flatten, nn.Unflatten)


def watched(module: nn.Module) -> bool:
    """Activations, Linear/Conv/recurrent/attention layers, and every other leaf module
    (normalisation, embeddings, the user's own layers), so a NaN is located where it starts."""
    if isinstance(module, ACTIVATIONS + LAYERS):
        return True
    return not isinstance(module, PASS_THROUGH) and next(module.children(), None) is None
#: Modules whose functional calls (nn.ReLU's F.relu, attention's softmax) their own hook sees.
SEEN_BY_MODULE_HOOKS = ACTIVATIONS + LAYERS + HOOKED_ELSEWHERE
#: Modules whose behaviour depends on model.train() / model.eval().
MODE_DEPENDENT: tuple[type[nn.Module], ...] = (
    nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm)


class NetworkDebugger(Engine):
    """Hooks into a model to record activation, gradient and update statistics per layer."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                 criterion: Callable[..., Any] | None = None, *, every: int = DEFAULT_EVERY,
                 warmup: int = DEFAULT_WARMUP, max_history: int = DEFAULT_MAX_HISTORY,
                 thresholds: rules.Thresholds | None = None, log_every: int | None = None,
                 sinks: Sequence[Any] = (), alerts: Sequence[Any] = (),
                 activation_sample: int = 1024, distributed: bool | None = None,
                 full_every: int = DEFAULT_FULL_EVERY) -> None:
        require_module(model)
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, "
                            f"got {type(optimizer).__name__}")
        if criterion is not None and not callable(criterion):
            raise TypeError(f"criterion must be a loss module or function, "
                            f"got {type(criterion).__name__}")
        for name, value, low in (("every", every, 1), ("warmup", warmup, 0),
                                 ("max_history", max_history, 2), ("full_every", full_every, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if log_every is not None and (isinstance(log_every, bool)
                                      or not isinstance(log_every, int) or log_every < 1):
            raise ValueError(f"log_every must be an integer >= 1 or None, got {log_every!r}")
        self._compiled = is_compiled(model)   # torch.compile's wrapper: hooks go on the wrapper,
        self._root = model if self._compiled else unwrap(model)   # names come from inside it
        model = unwrap(compiled_inner(model))  # DistributedDataParallel: watch the module
        self.model = model
        self.log_every = log_every
        self.optimizer = optimizer
        self.every, self.warmup = every, warmup
        self.full_every = full_every
        self.thresholds = thresholds or rules.Thresholds()
        # the lesson's attributes
        self.loss_history_raw: list[float | torch.Tensor] = []
        self.lr_losses: list[tuple[float, float]] = []
        self.hooks: list[RemovableHandle] = []
        self.val_loss_history: list[float] = []
        self._val_at: list[int] = []            # len(loss_history) when each val loss came
        self._init_engine(max_history)
        self._warned_removed = False
        # loop faults (issue 16): zero_grad() between the passes of one step, frozen moves
        self._passes_in_step = 0
        self._cleared_this_step = False
        #: (parameter index, its version) at the first gradient of this step's last pass: the
        #: weights changed in place between two passes (SAM, a line search) when it moved
        self._pass_weights: tuple[int, int] | None = None
        self._weights_moved_between_passes = False
        self._accumulating_steps = 0
        self._cleared_steps: list[int] = []
        self._no_grad_before: tuple[list[nn.Parameter], list[torch.Tensor], list[bool],
                                    list[torch.Tensor]] | None = None
        self._grads_held: dict[int, tuple[weakref.ref, int]] = {}   # see _remember_grads
        self._moved_without_grad: dict[str, tuple[int, float]] = {}
        self._functional: FunctionalWatch | None = None
        # a debugger dropped mid-step (its mode still entered) takes its mode off torch's
        # stack when the collector frees it: the mode holds it weakly, so it is stale by then
        weakref.finalize(self, leave_stale_modes)
        self._module_stack: list[tuple[str, bool]] = []
        self._last_loss_seen: tuple[int, int, int] | None = None
        # the step, and the gradient bookkeeping that catches missing zero_grad() and friends
        self._step = 0                         # the step whose passes are running now
        self._scheduled_now = True             # _scheduled(_step), kept by _advance
        self._opt_steps = 0
        self._lrs: list[tuple[int, float]] = []   # (step, lr) whenever the lr changed
        self._backward_since_forward = False
        self._backwards = 0
        self._forwards = 0
        self._forwards_mark = 0                # _forwards at the end of the last step
        # train/eval mode: passes with gradients in eval mode, evaluation passes in train mode
        self._pass_counted = True
        self._pass_eval_modules: list[str] = []
        self._nobackward_streak = 0
        self._last_pass_train_modules: list[str] = []
        self._last_pass_grad = False
        self.eval_mode_training = rules.ModeEvidence()
        self.train_mode_eval = rules.ModeEvidence()
        # tensors that get gradients no optimizer applies
        self._graph_checked = False
        self._foreign: list[tuple[weakref.ref, tuple[int, ...]]] = []
        self._foreign_unstepped: dict[str, int] = {}
        self._unstepped: dict[str, int] = {}
        self._not_held: dict[str, int] = {}
        # what to watch
        self._layer_kinds: dict[str, str] = {}
        self._relu_layers: set[str] = set()     # outputs >= 0: a unit with sum 0 is dead
        self._layer_order: list[str] = []
        self._params: list[tuple[str, nn.Parameter]] = []
        self._param_keys: list[tuple[str, list[tuple[str, str]], dict[str, Any]]] = []
        self._param_layer: dict[str, str] = {}
        self._got_grad: list[bool] = []
        #: id(parameter) -> (a weak reference to it, its gradient state): see _watch_model
        self._param_memory: dict[int, tuple[weakref.ref, tuple[bool, bool, int]]] = {}
        self._grad_this_step: list[bool] = []
        self._last_bw_gen: list[int] = []
        #: fresh-gradient hooks attached now, by parameter index (see _set_fresh_hooks)
        self._param_handles: dict[int, RemovableHandle] = {}
        self._fresh_hooks: list[Callable[[torch.Tensor], None]] = []
        self._sentinel: int | None = None      # the one parameter hooked between stats steps
        self._sentinel_failed = False          # one missed a backward: every parameter, always
        self._first_fired: int | None = None   # the first gradient of this statistics step
        self._all_got_grad = False
        self._mode_modules: list[tuple[str, nn.Module]] = []
        self._signature: tuple[int, ...] = ()
        self._module_list: list[nn.Module] = []
        self.loss_inspector = LossInputInspector()
        self.batch_inspector = BatchInspector()
        #: targets of losses the debugger was not given (F.* calls, another loss module),
        #: seen on statistics steps only: their class order is judged only when the watched
        #: criterion is never called (see _observe_loss_inputs)
        self._functional_targets = BatchInspector()
        #: the watched criterion's targets in passes without gradients (validation): their
        #: class shares give the validation loss's chance level (see chance_loss)
        self._eval_targets = BatchInspector()
        self.criterion: Callable[..., Any] | None = criterion
        #: tokens, targets, padding, attention and the one-time probes of sequence models
        self.sequences = SequenceWatch(model, self._error)
        self._register_hooks()
        if criterion is not None:
            self._watch_criterion(criterion)
        self._setup_production(sinks, alerts, activation_sample, distributed)

    # -- when: the schedule of statistics steps --------------------------------------------
    def _scheduled(self, step: int) -> bool:
        """Is `step` a statistics step: warm-up, every `every`-th, every `log_every`-th."""
        return (step < self.warmup or step % self.every == 0
                or (self.log_every is not None and step % self.log_every == 0))

    def _full(self, step: int) -> bool:
        """Is statistics step `step` a full one: warm-up, a log step, or one statistics step in
        ceil(full_every / every)."""
        if step < self.warmup or (self.log_every is not None and step % self.log_every == 0):
            return True
        spacing = -(-self.full_every // self.every)
        return step % self.every == 0 and (step // self.every) % spacing == 0

    def close(self) -> None:
        """Remove the hooks and close the sinks (flushing what they hold)."""
        self.remove_hooks()
        if self._logger is not None and self.is_main:
            self._logger.close()

    # -- hooks: what is measured at each one --------------------------------------------------
    def _register_hooks(self) -> None:
        model = self._root
        self.hooks.append(model.register_forward_pre_hook(
            self._guarded("forward", self._on_root_forward), with_kwargs=True))
        # random layers left on at evaluation, however applied (see lesson.debugger.stochastic)
        self._eval_probe = EvalDeterminismProbe(model, [], lambda: self._step, self._error)
        # the root output's checks: a statistics-step hook (Engine._attach_step_hooks), except
        # on a compiled wrapper, whose own hooks run outside the graph and stay
        self._root_output_hook = self._guarded("forward", self._on_root_output)
        if self._compiled:
            self.hooks.append(model.register_forward_hook(self._root_output_hook,
                                                          with_kwargs=True))
        self._watch_model()
        if self.optimizer is not None:
            self._step_pre_hook = self._guarded("optimizer step", self._on_step_pre)
            self._toggle_step_pre_hook(True)        # step 0 is a statistics step
            self.hooks.append(self.optimizer.register_step_post_hook(
                self._guarded("optimizer step", self._on_step_post)))
        self._watch_optimizers()

    def _model_signature(self) -> tuple[int, ...]:
        """What the watched set depends on: the modules, the parameters and which train. Read
        from the modules found last time (a module added or swapped anywhere changes its
        parent's children), without walking the tree: it is checked every statistics step."""
        mods = self._module_list
        return (tuple([id(c) for m in mods for c in m._modules.values()])
                + tuple([id(p) * 2 + p.requires_grad for m in mods
                         for p in m._parameters.values() if p is not None]))

    def _watch_model(self) -> None:
        """(Re)build what is watched from the model as it is now: its watched modules, its
        trainable parameters (each with a gradient hook), its train/eval-dependent modules.
        Runs at attach time and whenever the user froze, unfroze, added or swapped something
        (checked at the root forward of statistics steps), so the debugger follows the model."""
        pinned_on = self._pinned and bool(self._attached_modules)
        self._attach_step_hooks(False, force=True)
        model = self.model
        self._module_list = list(model.modules())
        self._signature = self._model_signature()
        self._step_hooks = []
        self._stack_step_hooks = [
            (module, tuple(self._guarded("forward", h) for h in self._stack_hooks(
                name, isinstance(module, SEEN_BY_MODULE_HOOKS))))
            for name, module in model.named_modules() if name]
        # weight_norm/spectral_norm's own modules compute a weight, not an activation
        parametrizing = {id(m) for p in self._module_list
                         if isinstance(p, parametrize.ParametrizationList) for m in p.modules()}
        for name, module in model.named_modules():
            if watched(module) and id(module) not in parametrizing:
                name = name or type(module).__name__
                self._layer_kinds.setdefault(name, type(module).__name__)
                self._step_hooks.append(
                    (module, self._activation_hook(name, isinstance(module, RELU_FAMILY),
                                                   isinstance(module, nn.Softmax))))
        # what each parameter's gradient did so far, kept for the parameters that come back
        # (torch.func.functional_call swaps them out for the length of one pass)
        memory = self._param_memory
        for (_, p), got, now, gen in zip(self._params, self._got_grad, self._grad_this_step,
                                         self._last_bw_gen):
            memory[id(p)] = (weakref.ref(p), (got, now, gen))
        for key in [k for k, (ref, _) in memory.items() if ref() is None]:
            del memory[key]
        remove_tensor_hooks(list(self._param_handles.values()), [p for _, p in self._params])
        self._param_handles = {}
        self._sentinel = self._first_fired = None       # indices change: chosen again
        self._params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self._param_layer = {n: layer_of(n) for n, _ in self._params}
        #: per parameter: its accumulator keys and the record fields that never change
        self._param_keys = [
            (n, [("grad", n), ("weight", n), ("update", n), ("stale", n)],
             {"layer": self._param_layer[n], "numel": p.numel(), "ndim": p.dim(),
              "fan_in": p.numel() // p.shape[0] if p.dim() >= 2 and p.shape[0] else None})
            for n, p in self._params]
        kept = [memory.get(id(p)) for _, p in self._params]
        state = [k[1] if k is not None and k[0]() is p else (False, False, -1)
                 for k, (_, p) in zip(kept, self._params)]
        self._got_grad = [s[0] for s in state]
        self._grad_this_step = [s[1] for s in state]
        self._last_bw_gen = [s[2] for s in state]
        self._all_got_grad = all(self._got_grad)
        self._fresh_hooks = [self._guarded(n, self._fresh_grad_hook(i))
                             for i, (n, _) in enumerate(self._params)]
        self._set_fresh_hooks(every_param=True)
        self._param_step_hooks = [(p, self._guarded("backward", self._grad_hook(i)))
                                  for i, (_, p) in enumerate(self._params)]
        self._mode_modules = [(n, m) for n, m in model.named_modules()
                              if isinstance(m, MODE_DEPENDENT)]
        self._eval_probe.mode_modules = [m for _, m in self._mode_modules]
        if pinned_on:       # compiled with the module hooks in place: they stay (see _advance)
            self._attach_step_hooks(True, force=True)

    def _is_stats_step(self) -> bool:
        return self._scheduled_now and self._step != self._closed_step

    def _collecting(self) -> bool:
        if self._eval_probe._busy or self._probing:  # the probes' passes are not the user's
            return False
        return self._is_stats_step() and (torch.is_grad_enabled() or self._backwards == 0)

    def _activation_hook(self, name: str, relu_like: bool,
                         softmax: bool = False) -> Callable[..., None]:

        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if self._collecting():
                with outside(self._functional):
                    self._measure_activation(name, type(module).__name__, relu_like, output)
                    if softmax and self._full(self._step):   # attention weights, maybe
                        self.sequences.on_softmax_module(name, module, output, self._step)
        return hook

    def _measure_activation(self, name: str, kind: str, relu_like: bool, output: Any) -> None:
        """Fold one activation (a watched module's output, or a functional call's) into the
        step's buffer: its light statistics, and the full ones on full steps."""
        t = first_tensor(output)
        if t is None or t.dim() == 0 or t.numel() == 0:
            return
        full = self._full(self._step)
        try:
            units, sumsq = activation_summary(t)
            details = activation_details(t, relu_like, units) if full else None
        except Exception as exc:  # the user's training must never break on a statistic
            self._error(name, exc)
            return
        key = name
        old = self._buf.sums.get(("act_units", key))
        if old is not None and old.shape != units.shape:
            key = f"{name}#{units.numel()}"      # called again on another shape
        if key not in self._layer_order:
            self._layer_order.append(key)
            self._layer_kinds.setdefault(key, kind)
            if relu_like:
                self._relu_layers.add(key)
        buf = self._buf
        buf.add_sum(("act", key), sumsq)
        buf.add_sum(("act_units", key), units)
        buf.add_counts(("act", key), [t.numel(), 1, t.shape[0]])
        if details is not None:
            buf.add_sum(("act_full", key), details[0])
            buf.add_max(("act_full", key), details[1])
            if self.reducer is not None:   # sample_std over all ranks' samples
                buf.add_sum(("act_el", key), element_sums(t))
        if self._keeps_samples():      # a small copy for the activation histogram
            self._samples[key] = sample_values(t, self.activation_sample)

    # -- functional code (lesson.debugger.functional): statistics steps only -------------------
    def _enter_functional(self) -> None:
        """From a statistics step's forward to its backward: see F.relu, F.cross_entropy..."""
        if self._compiled:      # a mode around a compiled call would be a dynamo guard
            return
        leave_stale_modes()
        mode = self._functional
        if mode is not None:
            mode.calls.clear()          # a second forward in the same step: same names
            mode.active = True          # (a pass of gradient accumulation: seen like the first)
            return
        mode = FunctionalWatch(self._on_functional_activation, self._on_functional_loss,
                               self._on_functional_call, WATCHED_CALLS)
        mode.module_stack = self._module_stack
        mode.__enter__()
        self._functional = mode

    def _exit_functional(self) -> None:
        """Leave the mode if it is the innermost one (modes must be left in order); otherwise
        it stays, inactive, until the next chance."""
        mode = self._functional
        if mode is None:
            return
        mode.active = False
        if function_mode_on_top(mode):
            mode.__exit__(None, None, None)
            self._functional = None
        leave_stale_modes()

    def _on_functional_activation(self, name: str, relu_like: bool, output: Any) -> None:
        if self._collecting():
            self._measure_activation(name, "F." + name.rpartition("/")[2].split("#")[0],
                                     relu_like, output)

    def _on_functional_call(self, func: Callable[..., Any], args: tuple[Any, ...],
                            kwargs: dict[str, Any], out: Any, where: str) -> None:
        """Attention, reads of one position, losses and backward calls, for the sequence
        checks (lesson.debugger.sequences); out is None for a backward call."""
        if not self._collecting():
            return
        try:
            if out is None:
                self.sequences.on_backward(args)
            else:
                self.sequences.on_call(func, args, kwargs, out, where, self._step,
                                       self._full(self._step))
        except Exception as exc:  # the user's forward must never break on a check
            self._error("sequence checks", exc)

    def _on_functional_loss(self, output: Any, target: Any, fn: Callable[..., Any]) -> None:
        if torch.is_grad_enabled() and isinstance(output, torch.Tensor) \
                and output.requires_grad:
            self._observe_loss_inputs(output, target, fn, functional=True)

    def _stack_hooks(self, name: str, hooked: bool) -> tuple[Callable[..., None],
                                                             Callable[..., None]]:
        """Forward pre/post hooks that keep `_module_stack` (the modules running now)."""
        stack = self._module_stack

        def push(module: nn.Module, args: Any) -> None:
            stack.append((name, hooked))

        def pop(module: nn.Module, args: Any, output: Any) -> None:
            if stack:
                stack.pop()
        return push, pop

    def _set_fresh_hooks(self, every_param: bool) -> None:
        """Fresh-gradient hooks on every parameter for a statistics step; between statistics
        steps on one only, the sentinel: the first parameter to get its gradient in the last
        statistics step's backward (an output layer's), which every backward reaches. A
        backward then calls one hook, not one per parameter; what the others keep (which
        tensors got a gradient this step) is read on statistics steps. Every parameter stays
        hooked where no sentinel can be trusted: before one is chosen, without an optimizer (a
        backward ends the step then), on a compiled model, and for good once a sentinel missed
        a backward that reached other parameters (see _check_sentinel)."""
        if self._sentinel is None or self.optimizer is None or self._compiled or self._pinned:
            every_param = True
        handles = self._param_handles
        if every_param:     # a tensor frozen since the last statistics step takes no hook
            for i, (_, p) in enumerate(self._params):
                if i not in handles and p.requires_grad:
                    handles[i] = p.register_hook(self._fresh_hooks[i])
        else:
            drop = [i for i in handles if i != self._sentinel]
            remove_tensor_hooks([handles.pop(i) for i in drop], [self._params[i][1] for i in drop])

    def _check_sentinel(self) -> None:
        """After a plain step's optimizer step: a sentinel that got no gradient while another
        parameter holds one missed a backward (a head trained on some steps only, say), so
        every parameter is hooked from now on and the missed pass is counted (a .grad that
        zero_grad(set_to_none=False) left in a step without backward would count one pass too
        many, once). A parameter that never had a gradient is looked at too, so one that gets
        it between statistics steps only is not called unused."""
        s = self._sentinel
        if s is not None and not self._grad_this_step[s] \
                and any(p.grad is not None for _, p in self._params):
            self._sentinel, self._sentinel_failed = None, True
            self._set_fresh_hooks(every_param=True)
            self._backward_since_forward = True
            self._count_pass()
        if not self._all_got_grad:
            self._mark_got_grad()

    def _mark_got_grad(self) -> None:
        """A parameter holding a .grad got a gradient, from a backward or set by hand."""
        got = self._got_grad
        for i, (_, p) in enumerate(self._params):
            if not got[i] and p.grad is not None:
                got[i] = True
        self._all_got_grad = all(got)

    def _count_pass(self) -> None:
        """The first gradient of a forward pass's backward: one training pass (in eval mode?)."""
        if not self._pass_counted:
            self._pass_counted = True
            self._backwards += 1
            if self._pass_eval_modules:
                self.eval_mode_training.add(self._pass_eval_modules, self._step)

    def _fresh_grad_hook(self, i: int) -> Callable[[torch.Tensor], None]:
        """Runs before this backward's gradient is added into p.grad."""
        def hook(grad: torch.Tensor) -> None:
            if self._first_fired is None:
                self._first_fired = i
            if not self._pass_counted:        # the first gradient of this pass's backward
                self._passes_in_step += 1
                p = self._params[i][1]
                last = self._pass_weights
                if last is not None and last[0] < len(self._params) \
                        and self._params[last[0]][1]._version != last[1]:
                    self._weights_moved_between_passes = True
                self._pass_weights = (i, p._version)
                if self._passes_in_step >= 2 and self._grad_this_step[i] and p.grad is None:
                    self._cleared_this_step = True     # zero_grad() between two passes
                self._count_pass()
            self._got_grad[i] = True
            self._grad_this_step[i] = True
            self._backward_since_forward = True
            if self._last_bw_gen[i] != self._opt_steps:
                self._last_bw_gen[i] = self._opt_steps
                if self._opt_steps > 0 and self._is_stats_step():
                    name, p = self._params[i]
                    if p.grad is not None:   # left over from before the last optimizer step
                        try:
                            stale = torch.linalg.vector_norm(p.grad.detach().float())
                            self._buf.set_sum(("stale", name), (stale * stale).reshape(1))
                        except Exception as exc:
                            self._error(name, exc)
        return hook

    def _grad_hook(self, i: int) -> Callable[[torch.Tensor], None]:
        """Runs after p.grad holds this backward's gradient (accumulated, as the step sees it)."""
        def hook(p: torch.Tensor) -> None:
            if p.grad is None or not self._is_stats_step():
                return
            name = self._params[i][0]
            try:
                sumsq = gradient_norm(p.grad)
                details = gradient_details(p.grad) if self._full(self._step) else None
            except Exception as exc:
                self._error(name, exc)
                return
            self._buf.set_sum(("grad", name), sumsq)
            self._buf.counts[("grad", name)] = [float(p.numel())]
            if details is not None:
                self._buf.set_sum(("grad_full", name), details[0])
                self._buf.maxes[("grad_full", name)] = details[1]
        return hook

    def _on_root_forward(self, module: nn.Module, args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> None:
        grad = torch.is_grad_enabled()
        if self.optimizer is None and self._forwards > 0 \
                and (self._backward_since_forward or self._backwards == 0):
            self._advance()       # no optimizer: a pass after a backward starts a new step
        self._forwards += 1
        collecting = False
        if self._is_stats_step():
            if self._model_signature() != self._signature:
                self._watch_model()      # frozen, unfrozen, added or swapped since last time
            self._attach_step_hooks(True)
            self._module_stack.clear()
            collecting = self._collecting()
            if collecting:
                self._enter_functional()
        elif self._attached_modules or self._attached_params:
            self._attach_step_hooks(False)
        # a pass with gradients but no backward before this one: an evaluation pass?
        if self._backward_since_forward:
            self._nobackward_streak = 0
            self._backward_since_forward = False
        elif self._last_pass_grad and self._last_pass_train_modules:
            self._nobackward_streak += 1
            if self._nobackward_streak >= 3:
                self.train_mode_eval.add(self._last_pass_train_modules, self._step)
        train_names: list[str] = []
        eval_names: list[str] = []
        if self._mode_modules:
            for n, m in self._mode_modules:
                (train_names if m.training else eval_names).append(n)
        self._last_pass_grad = grad
        self._last_pass_train_modules = train_names
        if grad:
            self._pass_counted = False
            self._pass_eval_modules = eval_names
        elif train_names:
            self.train_mode_eval.add(train_names, self._step)
        if collecting and self.batch_inspector is not None and self._full(self._step):
            x = first_tensor(args) if args else first_tensor(kwargs)
            if x is not None:
                try:
                    with outside(self._functional):
                        self.batch_inspector.observe_inputs(x, step=self._step)
                except Exception as exc:
                    self._error("batch inspector", exc)
        if not grad or not module.training:         # an evaluation pass, maybe
            self._eval_probe.observe(module, args, kwargs)
        if collecting and grad:
            with outside(self._functional):
                self.sequences.on_train_forward(args, kwargs, self._step,
                                                self._full(self._step), self._params)
        elif not grad:
            self.sequences.on_eval_forward(args, kwargs, self._step)

    def _on_root_output(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                        output: Any) -> None:
        """Statistics steps: the output of a pass that no loss can train ends the function
        mode; the first trainable one has its graph searched for tensors the model does not
        own."""
        out = first_tensor(output)
        if out is None or out.grad_fn is None or not torch.is_grad_enabled():
            # no loss on this output can be trained: the step's forward is over, and the
            # function mode must not outlive it (an evaluation pass, say, then no backward)
            self._exit_functional()
            return
        if self._graph_checked:
            return
        self._graph_checked = True              # once is enough: no cost on later passes
        known = {id(p) for _, p in self.model.named_parameters()}
        inputs = [t for t in list(args) + list(kwargs.values()) if isinstance(t, torch.Tensor)]
        known |= {id(t) for t in inputs}
        for leaf in graph_leaves(out):
            if id(leaf) not in known and leaf.requires_grad:
                self._foreign.append((weakref.ref(leaf), tuple(leaf.shape)))

    def _observe_loss_inputs(self, output: Any, target: Any, criterion: Any,
                             functional: bool = False) -> None:
        """What reaches the loss: on full statistics steps; the targets' class order on every
        training step (cheap, and sorted data shows only across many batches).

        The order is the watched criterion's stream. A loss the debugger was not given
        (`functional`: caught by the function mode on statistics steps only) goes to a stream
        of its own, used only when the watched criterion is never called: a GAN's
        discriminator losses (all-real, then all-fake targets by design) must not be read as
        the generator's data arriving sorted by class."""
        seen = (id(output), id(target), self._step)
        if seen == self._last_loss_seen:     # the criterion's hook, then its F.* call
            return
        self._last_loss_seen = seen
        try:
            inspector = self._functional_targets if functional else self.batch_inspector
            evaluating = not functional and not torch.is_grad_enabled()
            if evaluating and inspector is not None:
                inspector = self._eval_targets
            with outside(self._functional):
                if inspector is not None and isinstance(target, torch.Tensor):
                    inspector.observe_targets(target, step=self._step, evaluation=evaluating)
                if self.loss_inspector is not None and self._collecting() \
                        and self._full(self._step):
                    self.loss_inspector.observe(output, target, criterion, step=self._step)
        except Exception as exc:
            self._error("loss inspector", exc)

    # -- optimizer steps ----------------------------------------------------------------------

    def _on_step_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._functional is not None:
            self._exit_functional()
        if not self._is_stats_step():   # the bookkeeping bugs below persist: checked there
            return
        self._copy_params_without_grad(optimizer)
        held = self._holds(optimizer)
        for i, (name, p) in enumerate(self._params):
            if not self._grad_this_step[i]:
                continue
            if p.grad is None:          # zero_grad() between backward() and step()
                self._unstepped[name] = self._unstepped.get(name, 0) + 1
            elif id(p) not in held:     # unless another optimizer holds it (see evidence())
                self._not_held[name] = self._not_held.get(name, 0) + 1
        for ref, shape in self._foreign:
            t = ref()
            if t is not None and t.grad is not None and id(t) not in held:
                key = f"unregistered tensor {list(shape)}"
                self._foreign_unstepped[key] = self._foreign_unstepped.get(key, 0) + 1
        if self.reducer is not None:  # DDP has averaged the gradients by now: measure those
            for i, (_, p) in enumerate(self._params):
                if p.grad is not None:
                    self._grad_hook(i)(p)
        if not self._full(self._step):
            return
        self._measure_weights_before_step(held)

    def _on_step_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        stats = self._is_stats_step()
        if not stats:
            s = self._sentinel
            if (s is not None and not self._grad_this_step[s]) or not self._all_got_grad:
                self._check_sentinel()
        elif not self._all_got_grad:
            self._mark_got_grad()
        if self._before is not None:                # full steps (Engine)
            self._measure_updates()
        if self._no_grad_before is not None:
            self._measure_moves_without_grad()
        if self._passes_in_step:
            # passes at other weights (SAM's ascent step, a line search's closure calls) are
            # no accumulation: clearing between them is what those methods do
            if self._passes_in_step >= 2 and not self._weights_moved_between_passes:
                self._accumulating_steps += 1
                if self._cleared_this_step:
                    self._cleared_steps.append(self._step)
            self._passes_in_step, self._cleared_this_step = 0, False
            self._pass_weights, self._weights_moved_between_passes = None, False
        lr = optimizer.param_groups[0].get("lr") if optimizer.param_groups else None
        if isinstance(lr, torch.Tensor):
            # an lr tensor on an accelerator is read on statistics steps only: no host sync
            lr = float(lr) if lr.device.type == "cpu" or stats else None
        elif lr is not None:
            lr = float(lr)
        if lr is not None and (not self._lrs or self._lrs[-1][1] != lr):
            self._lrs.append((self._step, lr))
        self._opt_steps += 1
        self._advance()

    def _end_sequence_step(self) -> None:
        """The end of a statistics step, where no graph of the user's is alive: the sequence
        checks keep the step's evidence and, once, run their probes, which call the model
        (restored bitwise afterwards) while every hook of the debugger stands by."""
        self._probing = True
        try:
            self.sequences.end_step(self._step)
        except Exception as exc:
            self._error("sequence checks", exc)
        finally:
            self._probing = False

    def _remember_grads(self) -> None:
        """At the end of the step before a statistics step: the .grad each stepped tensor holds
        (weakly) and its version, so that the statistics step tells a gradient left over
        unchanged (a tensor frozen without zero_grad()) from one set afresh by hand."""
        opt = self.optimizer
        self._grads_held = {} if opt is None else {
            id(p): (weakref.ref(p.grad), p.grad._version)
            for g in opt.param_groups for p in g["params"] if p.grad is not None}

    def _copy_params_without_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Statistics steps: copy the stepped tensors that got no gradient from a backward this
        step but hold a .grad, to see whether the step moves them (frozen, with a zero-filled
        gradient or an old one). A gradient set by hand this step (`p.grad = ...`, as
        torch.func and per-sample code do) is a gradient: only an all-zero .grad, or the one
        held unchanged since the last step, counts (see _measure_moves_without_grad)."""
        fresh = {id(p) for (_, p), got in zip(self._params, self._grad_this_step) if got}
        tensors = [p for g in optimizer.param_groups for p in g["params"]
                   if p.grad is not None and id(p) not in fresh]
        if tensors:
            held = self._grads_held
            old = [id(p) in held and held[id(p)][0]() is p.grad
                   and held[id(p)][1] == p.grad._version for p in tensors]
            zero = [gradient_norm(p.grad).reshape(()) == 0 for p in tensors]
            self._no_grad_before = (tensors, [p.detach().clone() for p in tensors], old, zero)

    def _measure_moves_without_grad(self) -> None:
        """After the step: the moves of the tensors copied before it whose gradient was old or
        all zero, and that no backward inside the step refilled (`step(closure)` runs its
        passes there)."""
        if self._no_grad_before is None:
            return
        tensors, before, old, zero = self._no_grad_before
        self._no_grad_before = None
        fresh = {id(p) for (_, p), got in zip(self._params, self._grad_this_step) if got}
        rows = torch.stack([
            torch.stack([torch.linalg.vector_norm((p.detach() - b).float())
                         / torch.linalg.vector_norm(b.float()).clamp_min(1e-30),
                         z.to(p.device, torch.float32)])
            for p, b, z in zip(tensors, before, zero)]).tolist()  # rare: one sync
        names = {id(p): n for n, p in self.model.named_parameters()}
        for p, was_old, (move, was_zero) in zip(tensors, old, rows):
            if move > 0 and (was_old or was_zero) and id(p) not in fresh:
                self._moved_with_zero_grad(names.get(id(p), f"tensor {list(p.shape)}"), move)

    def _moved_with_zero_grad(self, name: str, move: float) -> None:
        """A tensor without gradient that the step moved by `move` (relative to its norm): one
        that got none this step but kept a .grad (above), or, on full steps, a gradient
        zero-filled after the backward (`p.grad.zero_()` to "freeze" it; Engine._decode)."""
        count, top = self._moved_without_grad.get(name, (0, 0.0))
        self._moved_without_grad[name] = (count + 1, max(top, move))

    def _advance(self) -> None:
        """End the current step: write its record if it was a statistics step, and make the
        hooks ready for the next one (between statistics steps, nothing changes)."""
        if self._functional is not None:
            self._exit_functional()
        was_scheduled = self._scheduled_now
        if was_scheduled:
            self._end_sequence_step()
            if self._step != self._closed_step and (self._buf or self.reducer is not None):
                self._close()   # across ranks: on the schedule alone, never on local data
            if self._first_fired is not None and not self._sentinel_failed:
                self._sentinel = self._first_fired
        if self._forwards == self._forwards_mark and not self._compiled and not self._pinned \
                and any(self._grad_this_step):
            # gradients came, but the model's forward ran none of its hooks: it runs compiled
            # (torch.compile after attaching, or the module given here and the wrapper
            # trained). Module hooks now stay as dynamo traced them (see _attach_step_hooks).
            self._pinned = True
        self._forwards_mark = self._forwards
        self._step += 1
        self._scheduled_now = self._scheduled(self._step)
        if not self._scheduled_now:
            if was_scheduled and self.hooks:        # the statistics step's hooks go
                if self._attached_modules or self._attached_params:
                    self._attach_step_hooks(False)
                if len(self._param_handles) > 1:
                    self._set_fresh_hooks(every_param=False)
                self._toggle_step_pre_hook(False)
                self._toggle_global_hooks(False)
        elif self.hooks:       # ready before the forward: a compiled forward runs no root hook
            if (self._compiled or self._pinned) and self._model_signature() != self._signature:
                self._watch_model()         # otherwise the root's pre-hook looks (the user may
            self._attach_step_hooks(True)   # still freeze something before the forward)
            self._set_fresh_hooks(every_param=True)
            self._toggle_step_pre_hook(True)
            self._toggle_global_hooks(True)
            self._first_fired = None
            self._remember_grads()
        if self.reducer is not None:
            self.reducer.step = self._step
        self._grad_this_step = [False] * len(self._params)

    # -- losses -------------------------------------------------------------------------------
    def record_loss(self, loss_value: float | torch.Tensor) -> None:
        """Record one training loss: a number, or a 0-dim tensor read later without a sync."""
        if self._removed:
            self._warn_if_removed("record_loss")
        value = self._loss_value(loss_value, "loss")
        if not isinstance(value, torch.Tensor) and self.reducer is not None:
            value = torch.tensor(value, dtype=torch.float64)  # averaged across ranks at the record
        raw = self.loss_history_raw
        raw.append(value)
        if isinstance(value, torch.Tensor):
            self._loss_pending.append(len(raw) - 1)

    def record_val_loss(self, loss_value: float | torch.Tensor) -> None:
        """Record one validation loss (read at once: validation is rare; a NaN is reported)."""
        self._warn_if_removed("record_val_loss")
        value = self._loss_value(loss_value, "validation loss")
        self.val_loss_history.append(float(value))
        self._val_at.append(len(self.loss_history_raw))

    def _warn_if_removed(self, what: str) -> None:
        """After remove_hooks()/close() nothing is measured any more: say so, once."""
        if self._removed and not self._warned_removed:
            self._warned_removed = True
            warnings.warn(f"NetworkDebugger.{what}() after remove_hooks()/close(): the loss is "
                          f"kept, but no activation, gradient or update is measured any more, "
                          f"so diagnose() judges the history up to the removal",
                          RuntimeWarning, stacklevel=3)

    @staticmethod
    def _loss_value(value: Any, what: str) -> float | torch.Tensor:
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ValueError(f"{what} must be a number or a 0-dim tensor, "
                                 f"got a tensor of shape {tuple(value.shape)}")
            if value.dim() == 0 and not value.requires_grad:
                return value            # already what is kept (the common `loss.detach()`)
            return value.detach().reshape(())
        if isinstance(value, bool) or not hasattr(value, "__float__"):
            raise TypeError(f"{what} must be a number or a 0-dim tensor, got {type(value).__name__}")
        return float(value)

    @property
    def loss_history(self) -> list[float]:
        """Recorded losses as floats (pending tensors are copied to the host in one transfer)."""
        self._resolve_losses()
        return [float(v) for v in self.loss_history_raw]

    # -- the lesson's views -------------------------------------------------------------------
    @property
    def activation_stats(self) -> dict[str, dict[str, float]]:
        """Latest per-layer activation statistics, with the lesson's keys."""
        rec = self._latest_with("layers", full=True)
        return {name: {"mean": s["act_mean"], "std": s["act_std"],
                       "fraction_zero": s["zero_fraction"], "min": s["act_min"],
                       "max": s["act_max"], "dead_fraction": s["dead_fraction"],
                       "sample_std": s["sample_std"]}
                for name, s in (rec["layers"].items() if rec else [])}

    @property
    def gradient_stats(self) -> dict[str, dict[str, float]]:
        """Latest gradient statistics per layer, from its parameters' gradients."""
        rec = self._latest_with("params", lambda p: "grad_abs_mean" in p)
        out: dict[str, dict[str, float]] = {}
        for name, p in (rec["params"].items() if rec else []):
            if "grad_abs_mean" not in p:
                continue
            layer = p["layer"] or name
            n = p["numel"]
            acc = out.setdefault(layer, {"n": 0, "sum": 0.0, "sumsq": 0.0, "abs": 0.0,
                                         "max": 0.0})
            acc["n"] += n
            acc["sum"] += p["grad_mean"] * n
            acc["sumsq"] += p["grad_norm"] ** 2
            acc["abs"] += p["grad_abs_mean"] * n
            acc["max"] = max(acc["max"], p["grad_max"])
        result = {}
        for layer, a in out.items():
            mean = a["sum"] / a["n"]
            var = a["sumsq"] / a["n"] - mean * mean
            result[layer] = {"mean": mean, "std": math.sqrt(var) if var > 0 else 0.0,
                             "abs_mean": a["abs"] / a["n"], "max": a["max"],
                             "norm": math.sqrt(a["sumsq"])}
        return result

    def _latest_with(self, part: str, want: Callable[[dict[str, Any]], bool] | None = None,
                     full: bool = False) -> dict[str, Any] | None:
        self._flush()
        for rec in reversed(self.history):
            items = rec[part].values()
            if items and (not full or rec["full"]) \
                    and (want is None or any(want(v) for v in items)):
                return rec
        return None

    # -- diagnosis ----------------------------------------------------------------------------
    def evidence(self) -> rules.Evidence:
        """Everything the rules judge, gathered from the hooks (see lesson.debugger.rules)."""
        self._flush()
        never = [n for (n, _), got in zip(self._params, self._got_grad) if not got]
        return rules.Evidence(
            history=list(self.history), losses=self.loss_history,
            val_losses=list(self.val_loss_history), val_at=list(self._val_at),
            lrs=list(self._lrs), steps=self._step, optimizer_steps=self._opt_steps,
            backwards=self._backwards, has_optimizer=self.optimizer is not None,
            layer_order=list(self._layer_order), layer_kinds=dict(self._layer_kinds),
            never_grad=never, unstepped=self._unstepped_tensors(),
            symmetric=symmetric_layers(self.model),
            eval_mode_training=self.eval_mode_training, train_mode_eval=self.train_mode_eval,
            accumulating_steps=self._accumulating_steps, cleared_steps=list(self._cleared_steps),
            moved_without_grad=dict(self._moved_without_grad),
            stochastic_eval=self._eval_probe.evidence, chance_loss=self.chance_loss(),
            val_chance_loss=self.chance_loss(validation=True),
            transformer=self.sequences.transformer_like, post_ln=self.sequences.post_ln,
            marginal_entropy=self.sequences.marginal_entropy(),
            targets_unaligned=self.sequences.targets_unaligned())

    def chance_loss(self, validation: bool = False) -> float | None:
        """The loss of a classifier that learned nothing about its inputs: the entropy of the
        training targets' class shares (the loss of predicting the prior), or ln C when those
        are unknown or the criterion weighs classes or smooths labels (the uniform guess's
        loss, which they leave at ln C); None when no classification loss was seen
        (regression, or a loss the debugger does not know). `validation`: the same from the
        targets the criterion saw in passes without gradients, None when it saw none."""
        uniform = self.loss_inspector.chance_loss() if self.loss_inspector is not None else None
        if uniform is None or self.batch_inspector is None:
            return None if validation else uniform
        crit = self.criterion
        plain = not getattr(crit, "label_smoothing", 0.0) and all(
            getattr(crit, name, None) is None for name in ("weight", "pos_weight"))
        if validation:
            stream = self._eval_targets
        else:
            stream = self.batch_inspector if self.batch_inspector.target_batches \
                else self._functional_targets
        shares = stream.class_shares() if plain else None
        if shares is None or sum(p > 0 for p in shares) > round(math.exp(uniform)):
            return None if validation else uniform
        return -sum(p * math.log(p) for p in shares if p > 0)

    def diagnose(self) -> list[Finding]:
        """What is wrong, causes first (a finding that explains others comes before them and
        they link to it: `explained_by`, `explains`); an empty list when the run looks healthy."""
        evidence = self.evidence()
        found = rules.evaluate(evidence, self.thresholds)
        step = self._step
        order_from = self._functional_targets if self.batch_inspector is not None \
            and self.batch_inspector.target_batches == 0 else None
        for inspector in (self.loss_inspector, self.batch_inspector, order_from,
                          self.sequences):
            if inspector is not None:
                try:
                    found.extend(inspector.findings(step))
                except Exception as exc:
                    self._error(type(inspector).__name__, exc)
        found = rules.blame_output_layer(found, evidence)
        unique: dict[tuple[str, str | None], Finding] = {}
        for f in found:
            unique.setdefault((f.code, f.layer), f)
        return sort_findings(list(unique.values()))

    def check_loss_health(self) -> str:
        """The lesson's verdict on the loss curve: HEALTHY, NAN_OR_INF, NOT_DECREASING,
        OSCILLATING or NOT_ENOUGH_DATA."""
        chance = self.loss_inspector.chance_loss() if self.loss_inspector is not None else None
        return rules.loss_verdict(self.loss_history, self.thresholds, chance)

    def check_activations(self) -> list[str]:
        """Activation problems with the lesson's verdict words, or ["HEALTHY"]."""
        return self._verdicts({"DEAD_NEURONS", "EXPLODING_ACTIVATIONS", "COLLAPSED_ACTIVATIONS"})

    def check_gradients(self) -> list[str]:
        """Gradient problems with the lesson's verdict words, or ["HEALTHY"]."""
        return self._verdicts({"VANISHING_GRADIENT", "EXPLODING_GRADIENT"})

    def _verdicts(self, codes: set[str]) -> list[str]:
        items = [f"{f.code}: {f.layer + ' ' if f.layer else ''}{f.message}"
                 for f in self.diagnose() if f.code in codes]
        return items or ["HEALTHY"]

    def print_report(self) -> None:
        """Findings first (evidence and fix), then the lesson's per-layer tables."""
        from lesson.debugger.report_text import format_report
        print(format_report(self))

    def remove_hooks(self) -> None:
        """Detach every hook from the model, its parameters, the optimizer and the criterion."""
        for handle in self.hooks:
            handle.remove()
        remove_tensor_hooks(list(self._param_handles.values()), [p for _, p in self._params])
        self.hooks.clear()
        self._param_handles = {}
        self._toggle_step_pre_hook(False)
        for handle in self._global_handles:
            handle.remove()
        self._global_handles = []
        self._attach_step_hooks(False, force=True)
        self._exit_functional()
        self._removed = True

    def __enter__(self) -> "NetworkDebugger":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


