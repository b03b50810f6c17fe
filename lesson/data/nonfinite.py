"""Where did the NaN come from? Find the first operation that turned finite numbers into NaN/Inf.

When the loss is NaN, every tensor downstream of the culprit is NaN too, so looking at the
loss, or at the gradients, tells you *that* something broke, not *where*.
`torch.autograd.detect_anomaly` helps only halfway: it checks the outputs of backward
functions, so a NaN born in the forward pass (an `exp` that overflowed, a `log(0)`) is
reported at whichever backward function first passes it on, and never at its source.

`locate_nonfinite` runs one forward and one backward pass under a `TorchDispatchMode`, which
sees every ATen operation of both passes. For each operation it asks: were all inputs finite,
and is some output not? The first operation for which both hold is the source. Module hooks
keep a stack of the modules being run, so a forward operation is named with its module; each
autograd node is tagged with the module that created it, so a backward operation is named with
its module too. The culprit is then classified:

- LOG_OF_ZERO: `log`/`log2`/`log10`/`log1p` of 0 (gives -inf) or of a negative number (NaN);
- EXP_OVERFLOW: `exp`/`exp2`/`expm1`/`sinh`/`cosh` or `pow` overflowed to Inf;
- DIVISION_BY_ZERO: a division, `reciprocal` or `rsqrt` by 0 (also the backward of `sqrt` or
  of a norm at 0, and a variance over fewer samples than its correction);
- NAN_OR_INF with the operation's name otherwise (a matmul that overflowed, `sqrt(-1)`, ...).

Before anything runs, the batch itself and the parameters are checked: NaN/Inf already there
is reported as NONFINITE_INPUT (counts and first sample indices) or NAN_OR_INF (which
parameter), since no operation is to blame. The model is restored bitwise afterwards,
gradients included (`lesson.restore.preserved`).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterator

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from lesson.findings import Finding, layer_of
from lesson.restore import preserved, require_batch, require_module

#: How many sample indices (or parameter names) a finding lists at most.
MAX_LISTED = 10

_LOG_OPS = {"log", "log2", "log10", "log1p"}
_EXP_OPS = {"exp", "exp2", "expm1", "sinh", "cosh"}
_DIV_OPS = {"div", "reciprocal", "rsqrt"}
_VAR_OPS = {"var", "std", "var_mean", "std_mean"}
_META_KEY = "nndebug_module"
_CRITERION = "criterion"


def _leaves(obj: Any) -> Iterator[Any]:
    """Every non-container value inside nested tuples, lists and dicts."""
    if isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _leaves(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _leaves(item)
    else:
        yield obj


def _float_tensors(obj: Any) -> list[Tensor]:
    return [t for t in _leaves(obj) if isinstance(t, Tensor) and t.is_floating_point()]


def _all_finite(obj: Any) -> Tensor | bool:
    """True when every float tensor and every float scalar in `obj` is finite (on device)."""
    for v in _leaves(obj):
        if isinstance(v, float) and not math.isfinite(v):
            return False  # e.g. masked_fill(mask, -inf): the caller asked for the Inf
    checks = [torch.isfinite(t).all() for t in _float_tensors(obj) if t.numel()]
    return torch.stack(checks).all() if checks else True


def _op_name(func: Any) -> str:
    return func.overloadpacket.__name__


def nonfinite_input_finding(*, what: str, nan: int, inf: int, rows: int, total_rows: int,
                            first_rows: list[int], split: str | None = None) -> Finding:
    """The NONFINITE_INPUT finding, worded the same for a batch and for a whole data split."""
    where = f"{split} " if split else ""
    return Finding(
        "NONFINITE_INPUT",
        f"the {where}{what} already hold {nan} NaN and {inf} Inf values in {rows} of "
        f"{total_rows} samples (first: {first_rows[:5]})",
        evidence={"tensor": what, "split": split, "nan_count": nan, "inf_count": inf,
                  "rows_affected": rows, "total_rows": total_rows,
                  "first_indices": first_rows[:MAX_LISTED]},
    )


def _batch_finding(t: Tensor, what: str) -> Finding | None:
    """NONFINITE_INPUT for a batch tensor holding NaN/Inf, else None (one host transfer)."""
    if not t.is_floating_point() or t.numel() == 0:
        return None
    flat = t.detach().reshape(t.shape[0], -1)
    nan_rows, inf_rows = torch.isnan(flat), torch.isinf(flat)
    bad_rows = (nan_rows | inf_rows).any(dim=1)
    counts = torch.stack([nan_rows.sum(), inf_rows.sum(), bad_rows.sum()]).tolist()
    if counts[2] == 0:
        return None
    first = torch.nonzero(bad_rows).flatten()[:MAX_LISTED].tolist()
    return nonfinite_input_finding(what=what, nan=counts[0], inf=counts[1], rows=counts[2],
                                   total_rows=t.shape[0], first_rows=first)


def _gather(flags: list[Tensor]) -> list[bool]:
    """0-dim boolean tensors to Python, in one host transfer (per device, if several)."""
    device = flags[0].device
    return torch.stack([f.to(device) for f in flags]).tolist()


def _parameter_findings(model: nn.Module) -> list[Finding]:
    """NAN_OR_INF for parameters or buffers that are already non-finite before any operation."""
    tensors = [(n, t) for n, t in [*model.named_parameters(), *model.named_buffers()]
               if t.is_floating_point() and t.numel()]
    if not tensors:
        return []
    flags = _gather([(~torch.isfinite(t.detach())).any() for _, t in tensors])
    bad = [name for (name, _), flag in zip(tensors, flags) if flag]
    if not bad:
        return []
    return [Finding(
        "NAN_OR_INF",
        f"{len(bad)} parameter/buffer tensors already hold NaN/Inf before the forward pass "
        f"(first: {bad[0]}): a previous training step diverged, or they were loaded broken",
        layer=layer_of(bad[0]) or None,
        evidence={"source": "parameters", "tensors": bad[:MAX_LISTED]},
        advice="Reload a finite checkpoint, then find the step that diverged with "
               "NetworkDebugger (lower the learning rate, clip gradients).",
    )]


class _Interceptor(TorchDispatchMode):
    """Checks every ATen operation and keeps the first one that made finite inputs non-finite."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []   # modules being run in the forward pass, innermost last
        self.phase = "forward"
        self.culprit: dict[str, Any] | None = None
        self.ops_seen = 0

    # -- which module an operation belongs to ------------------------------------------------
    def where(self) -> tuple[str | None, str | None]:
        """(module name, backward function name) of the operation running now."""
        if self.phase == "forward":
            return (self.stack[-1] if self.stack else None), None
        current = getattr(torch._C, "_current_autograd_node", lambda: None)()
        if current is None:
            return None, None
        return current.metadata.get(_META_KEY), current.name()

    @staticmethod
    def tag(tensors: Any, owner: str | None) -> None:
        """Mark every not-yet-marked autograd node behind `tensors` as created in `owner`.

        Called when a tensor crosses a module boundary: on entry, the nodes behind the inputs
        belong to the caller; on exit, the untagged nodes behind the outputs to the callee."""
        todo = [t.grad_fn for t in _leaves(tensors) if isinstance(t, Tensor)]
        while todo:
            node = todo.pop()
            if node is None or _META_KEY in node.metadata:
                continue
            node.metadata[_META_KEY] = owner
            todo.extend(next_node for next_node, _ in node.next_functions)

    def enter(self, name: str, inputs: Any) -> None:
        self.tag(inputs, self.stack[-1] if self.stack else None)
        self.stack.append(name)

    def leave(self, outputs: Any) -> None:
        self.tag(outputs, self.stack.pop())

    # -- the check itself ---------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        if self.culprit is not None:
            return func(*args, **kwargs)
        self.ops_seen += 1
        if "empty" in _op_name(func):  # uninitialised memory: may hold anything
            return func(*args, **kwargs)
        inputs_finite = _all_finite((args, kwargs))
        saved = None
        if func._schema.is_mutable and inputs_finite is not False:
            saved = [a.clone() if isinstance(a, Tensor) else a for a in args]  # in-place op
        out = func(*args, **kwargs)
        produced = _float_tensors(out)
        if inputs_finite is False or not produced:
            return out
        nonfinite = torch.stack([(~torch.isfinite(t)).any() for t in produced if t.numel()]
                                or [torch.tensor(False)])
        if bool(inputs_finite & nonfinite.any()):  # the one sync per operation
            module, backward_of = self.where()
            self.culprit = _describe(func, saved if saved is not None else args, kwargs,
                                     produced, self.phase, module, backward_of)
        return out


def _count(mask: Tensor) -> int:
    return int(mask.sum())


def _describe(func: Any, args: Any, kwargs: dict, produced: list[Tensor], phase: str,
              module: str | None, backward_of: str | None) -> dict[str, Any]:
    """Classify the culprit operation and gather its evidence (called once, so syncs are fine)."""
    name = _op_name(func)
    out = torch.cat([t.detach().flatten() for t in produced])
    evidence: dict[str, Any] = {
        "op": f"aten.{name}", "phase": phase, "module": module, "backward_of": backward_of,
        "nan_count": _count(torch.isnan(out)), "inf_count": _count(torch.isinf(out)),
        "output_numel": out.numel(),
    }
    first = next((a for a in _leaves(args) if isinstance(a, Tensor)), None)
    code, detail = "NAN_OR_INF", f"aten.{name} produced NaN/Inf from finite inputs"
    if name in _LOG_OPS and first is not None:
        edge = -1.0 if name == "log1p" else 0.0
        zeros, negatives = _count(first == edge), _count(first < edge)
        evidence |= {"zeros_in_input": zeros, "negatives_in_input": negatives}
        if zeros or negatives:
            code = "LOG_OF_ZERO"
            detail = (f"aten.{name} was given {zeros} values equal to {edge:g} (giving -inf) "
                      f"and {negatives} below it (giving NaN)")
    elif name in _EXP_OPS and first is not None:
        evidence["max_input"] = float(first.max())
        if evidence["inf_count"]:
            code = "EXP_OVERFLOW"
            detail = (f"aten.{name} overflowed to Inf: its largest input is "
                      f"{evidence['max_input']:.4g}")
    elif name == "pow":
        base, exponent = (list(args) + [kwargs.get("exponent")])[:2]
        base_zero = _count(base == 0) if isinstance(base, Tensor) else int(base == 0)
        exp_negative = (bool((exponent < 0).any()) if isinstance(exponent, Tensor)
                        else exponent is not None and exponent < 0)
        if base_zero and exp_negative:
            code, detail = "DIVISION_BY_ZERO", (f"aten.pow raised {base_zero} zeros to a "
                                                "negative power (a division by zero)")
        elif evidence["inf_count"]:
            code, detail = "EXP_OVERFLOW", "aten.pow overflowed to Inf"
    elif name in _DIV_OPS and first is not None:
        denominator = args[1] if name == "div" else first
        zeros = (_count(denominator == 0) if isinstance(denominator, Tensor)
                 else int(denominator == 0))
        evidence["zeros_in_denominator"] = zeros
        if zeros:
            code = "DIVISION_BY_ZERO"
            detail = f"aten.{name} divided by zero in {zeros} places"
    elif name in _VAR_OPS:
        code = "DIVISION_BY_ZERO"
        detail = (f"aten.{name} over too few samples: the number of samples minus the "
                  "correction is 0 (e.g. std of a batch of one)")
    advice = ""
    if backward_of:
        detail += f", while back-propagating through {backward_of}"
        if code == "DIVISION_BY_ZERO" and any(k in backward_of for k in ("Sqrt", "Norm", "Pow")):
            advice = ("The forward pass is finite but the derivative of sqrt (or of a norm) at "
                      "0 is infinite: put the epsilon inside, torch.sqrt(x + eps), or use "
                      "torch.rsqrt(var + eps) as nn.LayerNorm does.")
    where = f"in '{module}'" if module else "outside any module"
    return {"code": code, "layer": module, "advice": advice,
            "message": f"first NaN/Inf of the {phase} pass {where}: {detail}",
            "evidence": evidence}


def _module_hooks(model: nn.Module, mode: _Interceptor) -> list[Any]:
    """Forward pre/post hooks on every module that keep `mode.stack` in step with the call."""
    handles = []
    root = type(model).__name__
    for name, module in model.named_modules():
        label = name or root

        def pre(m: nn.Module, args: Any, kwargs: Any, label: str = label) -> None:
            mode.enter(label, (args, kwargs))

        def post(m: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            mode.leave(output)

        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True))
    return handles


def _model_device(model: nn.Module) -> torch.device | None:
    tensor = next(iter([*model.parameters(), *model.buffers()]), None)
    return None if tensor is None else tensor.device


def locate_nonfinite(model: nn.Module, x: Tensor, y: Tensor,
                     criterion: Callable[[Tensor, Tensor], Tensor]) -> list[Finding]:
    """Run one forward and backward pass and name the first operation that produced NaN/Inf.

    Returns [] when the loss and every gradient are finite (an Inf that later operations
    absorb harmlessly, such as a mask, is not reported). Otherwise one finding: NONFINITE_INPUT
    when the batch already holds NaN/Inf, NAN_OR_INF when a parameter does, else the culprit
    operation (LOG_OF_ZERO, EXP_OVERFLOW, DIVISION_BY_ZERO or NAN_OR_INF) with its module
    (`Finding.layer`), pass and counts. The model's values, gradients, buffers and train/eval
    flags are restored afterwards, also on errors. Hooks already on the model run too, and
    their operations are checked like the model's: detach a monitor first for a clean answer.
    """
    require_module(model)
    require_batch(x, y)
    if not callable(criterion):
        raise TypeError(f"criterion must be callable, got {type(criterion).__name__}")
    device = _model_device(model)
    if device is not None:
        x, y = x.to(device), y.to(device)
    batch = [f for f in (_batch_finding(x, "inputs"), _batch_finding(y, "targets")) if f]
    if batch:
        return batch
    broken = _parameter_findings(model)
    if broken:
        return broken

    mode = _Interceptor()
    criterion_module = criterion if isinstance(criterion, nn.Module) else nn.Module()
    with preserved(model), preserved(criterion_module), torch.enable_grad():
        for p in model.parameters():
            p.grad = None
        handles = _module_hooks(model, mode)
        try:
            with mode:
                output = model(x)
                mode.enter(_CRITERION, output)
                loss = criterion(output, y)
                mode.leave(loss)
                mode.phase = "backward"
                if isinstance(loss, Tensor) and loss.requires_grad:
                    loss.backward(torch.ones_like(loss))
        finally:
            for handle in handles:
                handle.remove()
        if not isinstance(loss, Tensor):
            raise TypeError(f"criterion must return a tensor, got {type(loss).__name__}")
        grads = [(n, p.grad) for n, p in model.named_parameters() if p.grad is not None]
        flags = _gather([torch.isfinite(loss.detach()).all()]
                        + [(~torch.isfinite(g)).any() for _, g in grads])
        loss_finite, bad_grads = flags[0], [n for (n, _), bad in zip(grads, flags[1:]) if bad]

    if loss_finite and not bad_grads:
        return []
    outcome = {"loss_finite": loss_finite, "nonfinite_grads": bad_grads[:MAX_LISTED],
               "nonfinite_grad_count": len(bad_grads), "ops_checked": mode.ops_seen}
    if mode.culprit is None:  # e.g. a custom autograd Function written in Python
        return [Finding("NAN_OR_INF", "the loss or the gradients are NaN/Inf, but no ATen "
                        "operation produced them from finite inputs", evidence=outcome)]
    culprit = mode.culprit
    return [Finding(culprit["code"], culprit["message"], layer=culprit["layer"],
                    evidence=culprit["evidence"] | outcome, advice=culprit["advice"])]
