"""The debugger's statistics: computed on the tensor's own device, gathered to the host once.

Every statistic is kept as a *reducible accumulator*: a sum (counts, sums, sums of squares),
a maximum (largest value, largest |gradient|, per-unit "was ever non-zero" flags) or a plain
value that is not reduced (recorded losses). Accumulators of one statistics step live in a
`StepBuffer`; `gather()` packs them into one flat tensor per reduction operation, hands them
to a reduction function (the identity on one process; an all_reduce per operation across
processes), and copies the result to the host in a single transfer.

Nothing here keeps a reference to the tensors it measures: each function launches a handful of
reductions and returns small result tensors.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

import torch
from torch import nn

#: Activation modules whose output is exactly 0 on a whole half-line: a unit can "die".
RELU_FAMILY: tuple[type[nn.Module], ...] = (nn.ReLU, nn.ReLU6)

#: Layout of an activation's sum accumulator (on device) and max accumulator.
ACT_SUMS = ("sum", "sumsq", "zeros", "nonfinite", "sample_std")
ACT_MAXES = ("max", "neg_min")
#: Layout of a parameter gradient's accumulators.
GRAD_SUMS = ("sumsq", "abs_sum", "sum", "nonfinite")
GRAD_MAXES = ("abs_max",)

Reducer = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def first_tensor(output: Any) -> torch.Tensor | None:
    """The first floating-point tensor inside a module's output (tensor, tuple, list or dict)."""
    if isinstance(output, torch.Tensor):
        return output if output.is_floating_point() and not output.is_sparse else None
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (tuple, list)):
        for item in output:
            found = first_tensor(item)
            if found is not None:
                return found
    return None


def _as_float(t: torch.Tensor) -> torch.Tensor:
    """float16/bfloat16 are widened so that sums of squares neither overflow nor round away."""
    t = t.detach()
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def unit_maxima(per_element: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Reduce a per-element vector (one value per non-batch position of an output of `shape`)
    to one value per unit by its maximum: channels are the units of images (N, C, H, W[, D]),
    the last dimension is the unit of everything else ((N, F) or (N, T, F))."""
    if len(shape) >= 4:
        return per_element.reshape(shape[1], -1).amax(dim=1)
    if len(shape) <= 2:
        return per_element.reshape(-1)
    return per_element.reshape(-1, shape[-1]).amax(dim=0)


_SCRATCH_LIMIT = 1 << 24
"""Largest tensor (elements) given a kept scratch buffer; bigger ones get a temporary one."""
_scratch_local = threading.local()


def scratch_like(t: torch.Tensor) -> torch.Tensor:
    """A work buffer shaped like `t`, reused across calls (per thread, device and dtype).

    Elementwise statistics (centred squares, signs, |g|) need one temporary as large as the
    tensor they measure; on the CPU a fresh allocation of that size costs more page faults than
    the arithmetic itself, so the buffer is kept (CPU only: accelerators' caching allocators
    already make a temporary cheap). It never holds a reference to `t`."""
    n = t.numel()
    if n > _SCRATCH_LIMIT or t.device.type != "cpu":
        return torch.empty_like(t, memory_format=torch.contiguous_format)
    cache = getattr(_scratch_local, "buffers", None)
    if cache is None:
        cache = _scratch_local.buffers = {}
    key = (t.device, t.dtype)
    buf = cache.get(key)
    if buf is None or buf.numel() < n:
        buf = cache[key] = torch.empty(max(n, 1024), dtype=t.dtype, device=t.device)
    return buf[:n].view(t.shape)


def activation_accumulators(output: torch.Tensor, relu_like: bool
                            ) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Sums (ACT_SUMS) and maxima (ACT_MAXES, then one "ever non-zero" flag per unit for
    ReLU-family layers) of one module output, plus its element count and batch size.

    `sample_std` is the mean over output elements of the standard deviation across the batch
    (dimension 0): 0 means every sample got the same output, whatever its spread in space.
    Four passes over the tensor, all into one reused buffer: column sums, centred squares
    (exact for collapsed layers), min/max, signs; everything else is derived from per-column
    vectors."""
    x = _as_float(output)
    n = x.shape[0]
    flat = x.reshape(n, -1)
    col_sum = flat.sum(dim=0)
    mean = col_sum / n
    work = scratch_like(flat)
    var = torch.sub(flat, mean, out=work).square_().sum(dim=0).div_(n)
    lo, hi = torch.aminmax(flat)
    signs = torch.sign(flat, out=work)
    nonzero = (signs if relu_like else signs.abs_()).sum()   # ReLU outputs are >= 0
    # one small op per accumulator: [sum, sumsq, sample_std] from per-column vectors
    per_col = torch.stack([col_sum, var.addcmul(mean, mean).mul_(n), var.sqrt()]).sum(dim=1)
    nonfinite = torch.isfinite(mean).logical_not().sum()
    sums = torch.cat([per_col[:2], (flat.numel() - nonzero).reshape(1),
                      nonfinite.reshape(1).to(per_col.dtype),
                      per_col[2:] / mean.numel()])
    maxes = torch.stack([hi, lo.neg()])
    if relu_like:   # outputs are >= 0, so a unit is dead exactly when its column sums to 0
        maxes = torch.cat([maxes, unit_maxima(col_sum, x.shape).gt(0).to(hi.dtype)])
    return sums, maxes, flat.numel(), n


def gradient_accumulators(grad: torch.Tensor, detailed: bool = True
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Sums (GRAD_SUMS) and maxima (GRAD_MAXES) of one gradient tensor: a dot product for the
    squared norm and, when `detailed`, one |g| pass into a reused buffer for its sum and maximum
    and a plain sum (otherwise those three are 0: only the lesson's per-layer view reads them,
    so the monitor takes them on some statistics steps only)."""
    g = _as_float(grad)
    if g.is_sparse:
        g = g.coalesce().values()
    flat = g.reshape(-1)
    sq = torch.dot(flat, flat) if flat.numel() else flat.new_zeros(())
    bad = torch.isfinite(sq).logical_not().to(sq.dtype)
    if not detailed or not flat.numel():
        zero = sq.new_zeros(())
        return torch.stack([sq, zero, zero, bad]), zero.reshape(1)
    mag = torch.abs(flat, out=scratch_like(flat))
    return torch.stack([sq, mag.sum(), flat.sum(), bad]), mag.max().reshape(1)


def element_sums(output: torch.Tensor) -> torch.Tensor:
    """Per output element, the sum and the sum of squares over the batch (dimension 0): what
    ranks add up so that `sample_std` is taken over the samples of all of them."""
    flat = _as_float(output).reshape(output.shape[0], -1)
    return torch.cat([flat.sum(dim=0), (flat * flat).sum(dim=0)])


def pooled_sample_std(sums: list[float], samples: float) -> float:
    """`sample_std` from `element_sums` added over calls and ranks (`samples` in all)."""
    s, sq = torch.tensor(sums, dtype=torch.float64).reshape(2, -1) / max(samples, 1.0)
    return float((sq - s * s).clamp_min(0).sqrt().mean()) if s.numel() else float("nan")


def squared_norms(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """||t||^2 of each tensor: a BLAS dot product each on the CPU (faster there than a norm
    kernel), one multi-tensor kernel elsewhere."""
    if not tensors:
        return []
    floats = [_as_float(t) for t in tensors]
    if all(t.device.type == "cpu" for t in floats):
        flats = [t.reshape(-1) for t in floats]
        return [torch.dot(f, f) for f in flats]
    return [n * n for n in torch._foreach_norm(floats)]


def identity_reduce(sums: torch.Tensor, maxes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One process: nothing to reduce. (Across processes: all_reduce SUM, then all_reduce MAX.)"""
    return sums, maxes


@dataclass
class StepBuffer:
    """The accumulators of one statistics step, keyed by (what, name), kept on device.

    Counts known on the host (elements, calls, samples) stay on the host until `gather`,
    which turns them into one small tensor that is reduced together with the device sums."""

    sums: dict[Hashable, torch.Tensor] = field(default_factory=dict)
    maxes: dict[Hashable, torch.Tensor] = field(default_factory=dict)
    counts: dict[Hashable, list[float]] = field(default_factory=dict)
    values: dict[Hashable, torch.Tensor] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.sums or self.maxes or self.counts or self.values)

    def add_sum(self, key: Hashable, t: torch.Tensor) -> None:
        old = self.sums.get(key)
        self.sums[key] = t if old is None or old.shape != t.shape else old + t

    def set_sum(self, key: Hashable, t: torch.Tensor) -> None:
        self.sums[key] = t

    def add_max(self, key: Hashable, t: torch.Tensor) -> None:
        old = self.maxes.get(key)
        self.maxes[key] = t if old is None or old.shape != t.shape else torch.maximum(old, t)

    def add_counts(self, key: Hashable, counts: list[float]) -> None:
        old = self.counts.get(key)
        self.counts[key] = list(counts) if old is None else [a + b for a, b in zip(old, counts)]

    def set_value(self, key: Hashable, t: torch.Tensor) -> None:
        self.values[key] = t

    def gather(self, reduce: Reducer = identity_reduce, *, step: int = 0
               ) -> dict[str, dict[Hashable, list[float]]]:
        """Reduce and copy everything to the host in one transfer; returns plain floats.

        A cross-rank reducer (`lesson.distributed.RankReducer`) names the accumulator kinds it
        averages instead of summing; it then also averages the values (the recorded losses)."""
        parts = {"sums": self.sums, "maxes": self.maxes, "values": self.values}
        tensors = [t for part in parts.values() for t in part.values()]
        device = tensors[0].device if tensors else torch.device("cpu")
        dtype = torch.float32 if device.type == "mps" else torch.float64

        def flat(ts: list[torch.Tensor]) -> torch.Tensor:
            if not ts:
                return torch.zeros(0, dtype=dtype, device=device)
            if any(t.device != device for t in ts):
                ts = [t.to(device) for t in ts]
            return torch.cat([t.reshape(-1) for t in ts]).to(dtype)

        count_keys = list(self.counts)
        host_counts = [c for k in count_keys for c in self.counts[k]]
        sums = torch.cat([flat(list(self.sums.values())),
                          torch.tensor(host_counts, dtype=dtype).to(device)])
        averaged_kinds = getattr(reduce, "averaged_kinds", None)
        if averaged_kinds is None:
            sums, maxes = reduce(sums, flat(list(self.maxes.values())))
            values = flat(list(self.values.values()))
        else:
            values = flat(list(self.values.values()))
            layout = ([(k, t.numel()) for k, t in self.sums.items()]
                      + [(k, len(self.counts[k])) for k in count_keys]
                      + [(k, t.numel()) for k, t in self.values.items()])
            averaged = torch.tensor([k[0] in averaged_kinds for k, _ in layout],
                                    dtype=torch.bool).repeat_interleave(
                torch.tensor([n for _, n in layout], dtype=torch.long)).to(device)
            merged, maxes = reduce(torch.cat([sums, values]), flat(list(self.maxes.values())),
                                   averaged=averaged, step=step,
                                   layout=layout + [(k, t.numel()) for k, t in self.maxes.items()])
            sums, values = merged[:sums.numel()], merged[sums.numel():]
        host = torch.cat([sums, maxes, values]).tolist()     # the one host transfer

        out: dict[str, dict[Hashable, list[float]]] = {"sums": {}, "maxes": {}, "values": {},
                                                       "counts": {}}
        i = 0
        for name, part in parts.items():
            for key, t in part.items():
                out[name][key] = host[i:i + t.numel()]
                i += t.numel()
            if name == "sums":
                for key in count_keys:
                    out["counts"][key] = host[i:i + len(self.counts[key])]
                    i += len(self.counts[key])
        return out
