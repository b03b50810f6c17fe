"""Named running statistics that stay on the tensor's device until someone reads them.

The inspectors watch every statistics step of a training run. Reading a number to the host on
each step would force a device sync, so they fold each step's reduced values (0-dim tensors)
into a small on-device vector here; `to_host` brings everything an inspector holds over in a
single transfer when a diagnosis is asked for.
"""
from __future__ import annotations

import math

import torch

_KINDS = ("sum", "min", "max")
_NEUTRAL = {"sum": 0.0, "min": math.inf, "max": -math.inf}


class RunningStats:
    """Running sums, minima and maxima of a fixed set of named 0-dim values.

    `update(device, sums={...}, mins={...}, maxs={...})` takes 0-dim tensors (or Python
    numbers); names it does not get keep their value. NaN is ignored by the minima and
    maxima (fmin/fmax), so one non-finite batch does not erase the range seen so far. Names
    never updated read as 0 (sums), +inf (minima) or -inf (maxima).
    """

    def __init__(self, sums: tuple[str, ...] = (), mins: tuple[str, ...] = (),
                 maxs: tuple[str, ...] = ()) -> None:
        self._names = {"sum": sums, "min": mins, "max": maxs}
        self._values: torch.Tensor | None = None  # sums, then minima, then maxima
        self._neutral: dict[torch.device, torch.Tensor] = {}

    def _neutral_vector(self, device: torch.device) -> torch.Tensor:
        if device not in self._neutral:
            # filled on the device: copying a host list there would synchronise
            self._neutral[device] = torch.cat([
                torch.full((len(self._names[kind]),), _NEUTRAL[kind], dtype=torch.float32,
                           device=device) for kind in _KINDS])
        return self._neutral[device]

    def update(self, device: torch.device, *, sums: dict | None = None,
               mins: dict | None = None, maxs: dict | None = None) -> None:
        """Fold one step's values in: a stack and three element-wise ops, no host transfer."""
        neutral = self._neutral_vector(device)
        given = {"sum": sums or {}, "min": mins or {}, "max": maxs or {}}
        parts = []
        i = 0
        for kind in _KINDS:
            for name in self._names[kind]:
                value = given[kind].get(name)
                if value is None:
                    parts.append(neutral[i])
                elif isinstance(value, torch.Tensor):
                    parts.append(value.detach().reshape(()).to(torch.float32))
                else:
                    parts.append(torch.full((), float(value), dtype=torch.float32,
                                            device=device))
                i += 1
        new = torch.stack(parts)
        if self._values is None:
            self._values = new
            return
        old = self._values.to(device)
        n_sum, n_min = len(self._names["sum"]), len(self._names["min"])
        self._values = torch.cat([
            old[:n_sum] + new[:n_sum],
            torch.fmin(old[n_sum:n_sum + n_min], new[n_sum:n_sum + n_min]),
            torch.fmax(old[n_sum + n_min:], new[n_sum + n_min:])])

    def packed(self) -> torch.Tensor | None:
        """The on-device vector behind `unpack` (None before the first update)."""
        return self._values

    def unpack(self, values: list[float] | None) -> dict[str, float]:
        """Name the host copy of `packed()`."""
        out: dict[str, float] = {}
        i = 0
        for kind in _KINDS:
            for name in self._names[kind]:
                out[name] = values[i] if values is not None else _NEUTRAL[kind]
                i += 1
        return out

    def read(self) -> dict[str, float]:
        """Every value as a plain float (one host transfer)."""
        packed = self.packed()
        return self.unpack(None if packed is None else packed.tolist())


def to_host(parts: dict[str, torch.Tensor | None]) -> dict[str, list[float] | None]:
    """Bring several on-device tensors to the host as flat float lists in ONE transfer
    (concatenated on the first tensor's device, then split again)."""
    present = {k: t for k, t in parts.items() if t is not None}
    out: dict[str, list[float] | None] = {k: None for k in parts}
    if not present:
        return out
    device = next(iter(present.values())).device
    flat = torch.cat([t.detach().reshape(-1).to(device, torch.float32)
                      for t in present.values()]).tolist()
    i = 0
    for key, tensor in present.items():
        out[key] = flat[i:i + tensor.numel()]
        i += tensor.numel()
    return out
