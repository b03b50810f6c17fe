"""The debugger's statistics: computed on the tensor's own device, gathered to the host once.

Every statistic is kept as a *reducible accumulator*: a sum (counts, per-unit sums, sums of
squares), a maximum (largest value, largest |gradient|) or a plain value that is not reduced
(recorded losses). Accumulators of one statistics step live in a `StepBuffer`; `gather()`
packs them into one flat tensor per reduction operation, hands them to a reduction function
(the identity on one process; an all_reduce per operation across processes), and copies the
result to the host in a single transfer. `gather_many()` copies several steps' buffers in
one.

Nothing here keeps a reference to the tensors it measures: each function launches a handful of
reductions and returns small result tensors.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

import numpy as np
import torch
from torch import nn

#: Activation modules whose output is exactly 0 on a whole half-line: a unit can "die".
RELU_FAMILY: tuple[type[nn.Module], ...] = (nn.ReLU, nn.ReLU6)

#: Layout of the per-step accumulators: light ones on every statistics step, the "full" ones
#: (see NetworkDebugger.full_every) on some of them.
ACT_FULL_SUMS = ("nonzero", "sample_std")
ACT_FULL_MAXES = ("max", "neg_min")
GRAD_FULL_SUMS = ("abs_sum", "sum")
GRAD_FULL_MAXES = ("abs_max",)

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


def unit_sums(x: torch.Tensor) -> torch.Tensor:
    """One sum per unit of a module output of shape `x.shape`, over the batch and every other
    position: channels are the units of images (N, C, H, W[, D]), the last dimension is the
    unit of everything else ((N, F) or (N, T, F)); a 1-dim output is one unit. For outputs
    that are >= 0 (the ReLU family) a unit is dead exactly when its sum is 0."""
    if x.dim() >= 4:
        return x.sum(dim=[0] + list(range(2, x.dim())))
    if x.dim() == 3:
        return x.sum(dim=(0, 1))
    if x.dim() == 2:
        return x.sum(dim=0)
    return x.sum().reshape(1)


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


def activation_summary(output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The light statistics of one module output, taken on every statistics step: the sum per
    unit (`unit_sums`) and the sum of squares. Two passes over the tensor and nothing else: the
    mean, std, dead units and non-finite units all follow on the host from these two."""
    x = _as_float(output)
    flat = x.reshape(-1)
    return unit_sums(x), torch.dot(flat, flat).reshape(1)


def activation_details(output: torch.Tensor, relu_like: bool,
                       units: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The full statistics of one module output: sums (ACT_FULL_SUMS) and maxima
    (ACT_FULL_MAXES).

    `sample_std` is the mean over output elements of the standard deviation across the batch
    (dimension 0): 0 means every sample got the same output, whatever its spread in space. It
    is taken from centred squares (exact for collapsed layers, where sum-of-squares formulas
    leave rounding noise), in one reused buffer that then holds the signs for the zero count.
    `units` (from `activation_summary`) spares a pass for (N, F) outputs, whose units are the
    columns."""
    x = _as_float(output)
    n = x.shape[0]
    flat = x.reshape(n, -1)
    mean = (units / n if units is not None and x.dim() == 2 else flat.sum(dim=0).div_(n))
    work = scratch_like(flat)
    std = torch.sub(flat, mean, out=work).square_().sum(dim=0).div_(n).sqrt_().mean()
    lo, hi = torch.aminmax(flat)
    signs = torch.sign(flat, out=work)
    nonzero = (signs if relu_like else signs.abs_()).sum()   # ReLU outputs are >= 0
    return torch.stack([nonzero, std]), torch.stack([hi, lo.neg()])


def gradient_norm(grad: torch.Tensor) -> torch.Tensor:
    """The squared norm of one gradient (one dot product), as a 1-element tensor: what every
    statistics step takes. A NaN/Inf anywhere in the gradient makes it non-finite."""
    g = _as_float(grad)
    if g.is_sparse:
        g = g.coalesce().values()
    flat = g.reshape(-1)
    return torch.dot(flat, flat).reshape(1) if flat.numel() else flat.new_zeros(1)


def gradient_details(grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sums (GRAD_FULL_SUMS) and maxima (GRAD_FULL_MAXES) of one gradient: one |g| pass into a
    reused buffer for its sum and maximum, and a plain sum. Only the lesson's per-layer
    `gradient_stats` view reads them, so they are taken on full statistics steps only."""
    g = _as_float(grad)
    if g.is_sparse:
        g = g.coalesce().values()
    flat = g.reshape(-1)
    if not flat.numel():
        return flat.new_zeros(2), flat.new_zeros(1)
    mag = torch.abs(flat, out=scratch_like(flat))
    return torch.stack([mag.sum(), flat.sum()]), mag.max().reshape(1)


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


def _host_array(tensors: list[torch.Tensor]) -> np.ndarray:
    """All of `tensors`, flattened and joined, as one float64 array on the host: one copy."""
    if not tensors:
        return np.zeros(0)
    try:
        joined = torch.cat(tensors)     # the accumulators are 1-dim, on one device
    except RuntimeError:                # a 0-dim one, or a model split across devices
        device = tensors[0].device
        joined = torch.cat([t.to(device).reshape(-1) for t in tensors])
    if joined.dtype not in (torch.float32, torch.float64):   # e.g. a bfloat16 loss
        joined = joined.float()
    return joined.cpu().numpy().astype(np.float64)


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
               ) -> dict[str, dict[Hashable, np.ndarray]]:
        """Reduce and copy everything to the host in one transfer; returns float64 arrays.

        One process: one concatenation and one copy, and the host-known counts never visit
        the device. A cross-rank reducer (`lesson.debugger.distributed.RankReducer`) gets the sums
        with the counts appended (SUM all-reduce) and the maxima (MAX all-reduce); it names
        the accumulator kinds it averages instead of summing, and then also averages the
        values (the recorded losses)."""
        parts = {"sums": self.sums, "maxes": self.maxes, "values": self.values}
        tensors = [t for part in parts.values() for t in part.values()]
        device = tensors[0].device if tensors else torch.device("cpu")
        dtype = torch.float32 if device.type == "mps" else torch.float64
        count_keys = list(self.counts)
        host_counts = [c for k in count_keys for c in self.counts[k]]

        def flat(ts: list[torch.Tensor]) -> torch.Tensor:
            if not ts:
                return torch.zeros(0, dtype=dtype, device=device)
            if any(t.device != device for t in ts):
                ts = [t.to(device) for t in ts]
            return torch.cat([t if t.dim() == 1 else t.reshape(-1) for t in ts]).to(dtype)

        averaged_kinds = getattr(reduce, "averaged_kinds", None)
        if reduce is identity_reduce:
            return self.gather_many([self])[0]
        sums = torch.cat([flat(list(self.sums.values())),
                          torch.tensor(host_counts, dtype=dtype).to(device)])
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
        n_sums = sum(t.numel() for t in self.sums.values())
        host = torch.cat([sums, maxes, values]).cpu().numpy().astype(np.float64)  # one transfer
        counts = host[n_sums:n_sums + len(host_counts)]
        host = np.concatenate([host[:n_sums], host[n_sums + len(host_counts):]])
        return self._split(host, counts, count_keys)

    @staticmethod
    def gather_many(buffers: list["StepBuffer"]) -> list[dict[str, dict[Hashable, np.ndarray]]]:
        """Several buffers of one process to the host in a single transfer (float64 arrays)."""
        parts = [[t for part in (b.sums, b.maxes, b.values) for t in part.values()]
                 for b in buffers]
        tensors = [t for ts in parts for t in ts]
        host = _host_array(tensors)
        sizes = [t.numel() for t in tensors]
        out, i, j = [], 0, 0
        for b, ts in zip(buffers, parts):
            own = sizes[j:j + len(ts)]
            j += len(ts)
            n = sum(own)
            counts = np.asarray([c for k in b.counts for c in b.counts[k]], dtype=np.float64)
            out.append(b._split(host[i:i + n], counts, list(b.counts), own))
            i += n
        return out

    def _split(self, host: np.ndarray, counts: np.ndarray, count_keys: list[Hashable],
               sizes: list[int] | None = None) -> dict[str, dict[Hashable, np.ndarray]]:
        """Cut the host copy (sums, maxima, values in order; `sizes` their numel) and the
        counts back into keys."""
        out: dict[str, dict[Hashable, np.ndarray]] = {"sums": {}, "maxes": {}, "values": {},
                                                      "counts": {}}
        if sizes is None:
            sizes = [t.numel() for part in (self.sums, self.maxes, self.values)
                     for t in part.values()]
        i, k = 0, 0
        for name, part in (("sums", self.sums), ("maxes", self.maxes), ("values", self.values)):
            for key in part:
                out[name][key] = host[i:i + sizes[k]]
                i += sizes[k]
                k += 1
        i = 0
        for key in count_keys:
            out["counts"][key] = counts[i:i + len(self.counts[key])]
            i += len(self.counts[key])
        return out


def graph_leaves(out: torch.Tensor) -> list[torch.Tensor]:
    """Leaf tensors that receive gradients from `out` (AccumulateGrad nodes of its graph)."""
    leaves, seen, stack = [], set(), [out.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        var = getattr(fn, "variable", None)
        if isinstance(var, torch.Tensor):
            leaves.append(var)
        stack.extend(nxt for nxt, _ in fn.next_functions)
    return leaves


@torch.no_grad()
def symmetric_layers(model: nn.Module) -> dict[str, dict[str, float]]:
    """Linear/Conv layers whose rows (output units) are all identical: spread of rows / scale."""
    out = {}
    for name, m in model.named_modules():
        w = getattr(m, "weight", None)
        if not isinstance(m, (nn.Linear, nn.modules.conv._ConvNd)) or w is None \
                or w.shape[0] < 2 or w.is_meta:
            continue
        rows = w.detach().float().reshape(w.shape[0], -1)
        spread = (rows - rows[:1]).abs().amax()
        scale = rows.abs().amax()
        out[name or type(m).__name__] = (spread, scale, w.shape[0])
    if not out:
        return {}
    values = torch.stack([torch.stack([s, c]) for s, c, _ in out.values()]).tolist()
    return {name: {"row_spread": v[0], "weight_scale": v[1], "units": units}
            for (name, (_, _, units)), v in zip(out.items(), values)}
