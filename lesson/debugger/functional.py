"""Functional code, seen: activations and losses called through torch.nn.functional or torch ops.

Practitioners write `F.relu(self.fc1(x))` at least as often as `nn.ReLU()`, and call
`F.cross_entropy(...)` or a hand-written multi-term loss rather than the criterion they passed
to the debugger. Module hooks see none of that. `FunctionalWatch` is a `TorchFunctionMode`
that the debugger enters on statistics steps only (from the model's forward until the first
gradient arrives or the optimizer steps): every call of a function in `ACTIVATION_FUNCTIONS`
is measured like the output of an activation module and named after the module it was called
in (`fc_block/relu`, `relu` at the root; a second call in the same module `relu#2`), and every
call of a function in `LOSS_FUNCTIONS` has its (prediction, target) handed to the loss-input
inspector. Between statistics steps no mode is active and nothing is intercepted.

Calls made inside a module the debugger already hooks (nn.ReLU calls F.relu, nn.Softmax calls
F.softmax, MultiheadAttention its own softmax) are left to that module's hook.
"""
from __future__ import annotations

import contextlib
import weakref

from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

#: function -> (short name, relu-like: outputs >= 0, so a unit whose sum is 0 is dead)
ACTIVATION_FUNCTIONS: dict[Callable[..., Any], tuple[str, bool]] = {}
for _name, _relu_like in [("relu", True), ("relu6", True), ("leaky_relu", False),
                          ("elu", False), ("selu", False), ("celu", False), ("gelu", False),
                          ("silu", False), ("mish", False), ("softplus", False),
                          ("sigmoid", False), ("tanh", False), ("hardtanh", False),
                          ("hardsigmoid", False), ("hardswish", False),
                          ("softmax", False), ("log_softmax", False)]:
    for _owner in (F, torch, torch.Tensor):
        _fn = getattr(_owner, _name, None)
        if _fn is not None:
            ACTIVATION_FUNCTIONS.setdefault(_fn, (_name, _relu_like))
for _name in ("relu_", "sigmoid_", "tanh_"):          # in place, on tensors and in torch
    for _owner in (torch, torch.Tensor):
        if (_fn := getattr(_owner, _name, None)) is not None:
            ACTIVATION_FUNCTIONS.setdefault(_fn, (_name.rstrip("_"), _name == "relu_"))

#: losses whose first two arguments are (prediction, target)
LOSS_FUNCTIONS: frozenset[Callable[..., Any]] = frozenset(
    getattr(F, n) for n in ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
                            "huber_loss", "binary_cross_entropy",
                            "binary_cross_entropy_with_logits", "kl_div")
    if hasattr(F, n))

BACKWARD_FUNCTIONS = frozenset({torch.Tensor.backward, torch.autograd.backward,
                                torch.autograd.grad})

#: modules whose own hook already measures what they compute
HOOKED_ELSEWHERE: tuple[type, ...] = (nn.modules.loss._Loss,)


def inside_transform() -> bool:
    """Is a torch.func transform (grad, vmap, jacrev, ...) running now? Its tensors are
    wrappers that must not escape it (a statistic kept from inside `vmap` breaks the record
    it lands in), and a pass inside one is no training pass of the model: the debugger's
    hooks stand aside there."""
    return torch._C._functorch.peek_interpreter_stack() is not None


def _weak(fn: Callable[..., Any]) -> Callable[[], Callable[..., Any] | None]:
    """A weak reference to a bound method (a plain function is held as it is)."""
    if hasattr(fn, "__self__") and hasattr(fn, "__func__"):
        return weakref.WeakMethod(fn)
    return lambda: fn


class FunctionalWatch(TorchFunctionMode):
    """Reports activation calls to `on_activation(name, relu_like, output)` and loss calls to
    `on_loss(prediction, target, fn)`; `module_stack` holds the names of the modules running
    now (innermost last) and `skip` says whether the innermost one is hooked already."""

    def __init__(self, on_activation: Callable[[str, bool, Any], None],
                 on_loss: Callable[[Any, Any, Callable[..., Any]], None],
                 on_call: Callable[..., None] | None = None,
                 watched: frozenset[Callable[..., Any]] = frozenset()) -> None:
        super().__init__()
        # weakly: a debugger dropped mid-step must not be kept alive by its mode (see
        # leave_stale_modes, which takes such a mode off the stack)
        self._on_activation = _weak(on_activation)
        self._on_loss = _weak(on_loss)
        #: `on_call(func, args, kwargs, out, where)` for the functions in `watched` (and the
        #: backward functions, with out None), wherever they run: the sequence checks read
        #: attention inside nn.MultiheadAttention too (lesson.debugger.sequences)
        self._on_call = _weak(on_call) if on_call is not None else (lambda: None)
        self.watched = watched | BACKWARD_FUNCTIONS if on_call is not None else frozenset()
        self.module_stack: list[tuple[str, bool]] = []     # (name, hooked already)
        self.calls: dict[str, int] = {}
        self.active = True

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in self.watched and self.active and not inside_transform() \
                and (on_call := self._on_call()) is not None:
            if func in BACKWARD_FUNCTIONS:
                on_call(func, args, kwargs, None, "")
            else:
                out = func(*args, **kwargs)
                on_call(func, args, kwargs, out,
                        self.module_stack[-1][0] if self.module_stack else "")
                return self._after(func, args, out)
        if func in BACKWARD_FUNCTIONS:      # the forward is over: nothing more to see
            self.active = False
        out = func(*args, **kwargs)
        return self._after(func, args, out)

    def _after(self, func: Callable[..., Any], args: Any, out: Any) -> Any:
        """Report an activation or a loss call (outside modules hooked already)."""
        if not self.active or (self.module_stack and self.module_stack[-1][1]) \
                or inside_transform():
            return out
        spec = ACTIVATION_FUNCTIONS.get(func)
        if spec is None and func not in LOSS_FUNCTIONS:
            return out                   # most calls: nothing to report
        on_activation, on_loss = self._on_activation(), self._on_loss()
        if on_activation is None or on_loss is None:
            self.active = False          # its debugger is gone
            return out
        if spec is not None:
            where = self.module_stack[-1][0] if self.module_stack else ""
            base = f"{where}/{spec[0]}" if where else spec[0]
            n = self.calls[base] = self.calls.get(base, 0) + 1
            on_activation(base if n == 1 else f"{base}#{n}", spec[1], out)
        elif func in LOSS_FUNCTIONS and len(args) >= 2:
            on_loss(args[0], args[1], func)
        return out


def stale(mode: Any) -> bool:
    """A FunctionalWatch whose debugger is gone (it was dropped in the middle of a step)."""
    return isinstance(mode, FunctionalWatch) and (mode._on_activation() is None
                                                  or mode._on_loss() is None)


def leave_stale_modes() -> None:
    """Take stale FunctionalWatch modes off the top of torch's function-mode stack."""
    stack = torch.overrides._get_current_function_mode_stack()
    while stack and stale(stack[-1]):
        stack[-1].__exit__(None, None, None)
        stack = torch.overrides._get_current_function_mode_stack()


def function_mode_on_top(mode: TorchFunctionMode) -> bool:
    """Is `mode` the innermost active torch function mode (so it can be exited in order)?"""
    depth = torch._C._len_torch_function_stack()
    return depth > 0 and torch._C._get_function_stack_at(depth - 1) is mode


class _OffTheStack:
    """The innermost torch function mode taken off the stack for a block, then put back."""

    __slots__ = ("mode",)

    def __enter__(self) -> None:
        self.mode = torch._C._pop_torch_function_stack()

    def __exit__(self, *exc: Any) -> None:
        torch._C._push_on_torch_function_stack(self.mode)


_NOTHING = contextlib.nullcontext()


def outside(mode: TorchFunctionMode | None) -> contextlib.AbstractContextManager[Any]:
    """The debugger's own measuring code (module hooks, the loss and batch inspectors) runs
    with its mode taken off the stack: otherwise each of its tensor ops would pass through the
    mode too (about 230 calls on a full statistics step of a small CNN, a third of its cost)."""
    if mode is not None and function_mode_on_top(mode):
        return _OffTheStack()
    return _NOTHING
