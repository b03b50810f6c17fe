"""Nothing of the user's is lost: put a model and its optimizer back exactly as they were.

The active checks (overfit test, LR range test, gradient check, preflight) train or perturb a
model. They run inside `preserved(model, optimizer)`, which restores on exit, also when the
check raises or is interrupted with Ctrl-C.
"""
from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn


def _clone(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().clone()


@contextmanager
def preserved(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> Iterator[None]:
    """Snapshot the model (values, dtypes, devices, requires_grad, .grad, buffers, train/eval
    flags) and the optimizer's state, and restore them bitwise when the block ends."""
    params = {id(p): (p, _clone(p.data), p.requires_grad, _clone(p.grad))
              for p in model.parameters()}
    buffers = [(m, name, _clone(b)) for m in model.modules() for name, b in m._buffers.items()]
    modes = [(m, m.training) for m in model.modules()]
    opt_state = copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None
    try:
        yield
    finally:
        with torch.no_grad():
            for p, data, requires_grad, grad in params.values():
                p.data = data
                p.requires_grad_(requires_grad)
                p.grad = grad
            for m, name, b in buffers:
                m._buffers[name] = b
        for m, training in modes:
            m.training = training
        if optimizer is not None and opt_state is not None:
            optimizer.load_state_dict(opt_state)


def require_module(model: object, what: str = "model") -> nn.Module:
    """Raise a TypeError that says what was passed when `model` is not an nn.Module."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"{what} must be a torch.nn.Module, got {type(model).__name__}")
    return model


def require_parameters(model: nn.Module) -> None:
    """Raise a ValueError when the model has no trainable parameter to check or train."""
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(
            f"{type(model).__name__} has no trainable parameters (none with requires_grad=True)")


def require_batch(x: torch.Tensor, y: torch.Tensor | None = None) -> None:
    """Raise on an empty batch or on inputs and targets of different lengths."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"inputs must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() == 0 or x.shape[0] == 0:
        raise ValueError(f"the input batch is empty (shape {tuple(x.shape)})")
    if y is not None:
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"targets must be a torch.Tensor, got {type(y).__name__}")
        if y.dim() == 0 or y.shape[0] != x.shape[0]:
            raise ValueError(
                f"inputs and targets differ in length: x has {x.shape[0]} samples, "
                f"y has shape {tuple(y.shape)}")
