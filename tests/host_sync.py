"""Host syncs made visible on any device (tests' helper).

On CUDA, `torch.cuda.set_sync_debug_mode("error")` raises at every operation that waits for
the device. A CPU never waits, so there the same code runs under a torch function mode that
raises at each operation that would: reading a value on the host (`item`, `bool`, `float`,
`tolist`, `numpy`) and the operations whose output shape depends on the data (`nonzero`,
boolean-mask indexing, `unique`). A test parametrized over `DEVICES` runs its assertions on
the CPU everywhere and on CUDA where there is a GPU.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import pytest
import torch
from torch.overrides import TorchFunctionMode

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA to detect host syncs"))]

_HOST_READS = {
    torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.__bool__,
    torch.Tensor.__float__, torch.Tensor.__int__, torch.Tensor.__index__,
    torch.Tensor.nonzero, torch.nonzero, torch.Tensor.masked_select, torch.masked_select,
    torch.unique, torch.Tensor.unique, torch.unique_consecutive, torch.argwhere,
}


class HostSync(RuntimeError):
    """An operation that would wait for the device."""


class _NoHostReads(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if func in _HOST_READS or (
                name == "__getitem__" and len(args) > 1 and _bool_index(args[1])):
            raise HostSync(f"{name} reads the device's values on the host")
        return func(*args, **kwargs)


def _bool_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


@contextmanager
def no_host_sync(device: str) -> Iterator[None]:
    """Raise at any host sync inside the block (see the module's docstring)."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")
    else:
        with _NoHostReads():
            yield
