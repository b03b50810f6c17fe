"""The debugger across processes: merge every rank's statistics as if it were one big batch.

Under `DistributedDataParallel` each rank sees a slice of the global batch. The debugger's
statistics are kept as reducible accumulators (`lesson.debugger.stats`): sums and counts, whose sum over
ranks gives the global means; maxima (and minima, stored negated), whose maximum over ranks is
the global one; per-unit "was ever non-zero" flags, whose maximum says a unit is alive if it
fired on any rank, so a unit counts as dead only if it is dead on every rank. Quantities that
DDP already keeps identical on every rank (weights, gradients after the all-reduce, updates)
and the recorded losses are averaged instead of summed.

One reduction takes three collectives at a statistics step, on a schedule every rank follows
(the debugger's step counter, advanced by the optimizer step all ranks take):

1. a handshake: one MAX all-reduce of (step, buffer sizes, a checksum of the layout), each
   value also negated, so every rank learns the maximum and the minimum and hence whether all
   active ranks agree. If they do not (a rank skipped a step, or measured other layers), every
   rank learns it from the same numbers and all of them keep their local statistics: the
   reduction is skipped everywhere, never half-done, so no later collective can wait forever;
2. the SUM all-reduce of the sums (plus a 1 per active rank, to average what must be averaged);
3. the MAX all-reduce of the maxima.

A rank that runs out of data can leave early inside `torch.distributed.algorithms.join.Join`
with the DDP model and this reducer: it then shadows the reductions of the others with neutral
values (zeros for sums, -inf for maxima), as DDP does for its gradient all-reduce.
"""
from __future__ import annotations

import math
import zlib
from typing import Any, Callable, Hashable, Iterable

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join, Joinable, JoinHook

#: Accumulator kinds that every rank holds identically under DDP: averaged, not summed.
AVERAGED_KINDS = frozenset({"grad", "grad_full", "weight", "update", "stale", "zeroed",
                            "losses"})

_HANDSHAKE = 4  # step, number of sums, number of maxima, layout checksum


def world_size(group: Any = None) -> int:
    """Processes in the group, 1 when torch.distributed is not in use."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(group)
    return 1


def rank(group: Any = None) -> int:
    """This process's rank in the group, 0 when torch.distributed is not in use."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group)
    return 0


def is_main_process(group: Any = None) -> bool:
    """True on rank 0, and on a single process: the one that writes logs and reports."""
    return rank(group) == 0


def unwrap(model: Any) -> Any:
    """The module inside DistributedDataParallel or DataParallel (whose parameter and layer
    names then match a single-process run), else the model itself."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    return model.module if isinstance(model, (DataParallel, DistributedDataParallel)) else model


def is_compiled(model: Any) -> bool:
    """Is `model` the wrapper torch.compile returns for a module?"""
    from torch._dynamo.eval_frame import OptimizedModule

    return isinstance(model, OptimizedModule)


def compiled_inner(model: Any) -> Any:
    """The module inside torch.compile's wrapper (whose names carry no `_orig_mod.`), else
    the model itself."""
    return model._orig_mod if is_compiled(model) else model


def layout_checksum(keys: Iterable[Hashable]) -> int:
    """A checksum of the accumulator layout that is equal on every rank for equal layouts
    (Python's own `hash` of strings differs between processes)."""
    return zlib.crc32(repr(list(keys)).encode())


class RankReducer(Joinable):
    """Reduce the debugger's accumulators across the ranks of `group` (see the module doc).

    `reducer(sums, maxes, averaged=mask, step=s, layout=checksum)` returns the reduced
    `(sums, maxes)`; `last_skipped` tells whether the latest call kept local values because
    the ranks disagreed. `is_stats_step(step)` is the schedule and `step` the step about to
    run (its owner, the debugger, keeps it current): a rank that has joined early uses both
    to know which reductions of the others to shadow."""

    def __init__(self, group: Any = None,
                 is_stats_step: Callable[[int], bool] | None = None) -> None:
        super().__init__()
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("RankReducer needs torch.distributed.init_process_group() first")
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.is_stats_step = is_stats_step or (lambda step: True)
        self.step = 0                 # the step about to run; kept current by the owner
        self.last_skipped = False
        self.skipped: list[tuple[int, str]] = []
        self._device = torch.device("cpu")

    # -- one reduction ------------------------------------------------------------------------
    #: Read by `lesson.debugger.stats.StepBuffer.gather`: which accumulator kinds to average.
    averaged_kinds = AVERAGED_KINDS

    def __call__(self, sums: torch.Tensor, maxes: torch.Tensor, *,
                 averaged: torch.Tensor | None = None, step: int = 0,
                 layout: int | Iterable[Hashable] = 0) -> tuple[torch.Tensor, torch.Tensor]:
        if averaged is not None and averaged.shape != sums.shape:
            raise ValueError(f"averaged mask has shape {tuple(averaged.shape)}, "
                             f"sums have {tuple(sums.shape)}")
        self._device = sums.device
        if not isinstance(layout, int):
            layout = layout_checksum(layout)
        info = torch.tensor([step, sums.numel(), maxes.numel(), layout],
                            dtype=torch.float64, device=sums.device)
        agreed, (hi, lo) = self._handshake(info)
        self.last_skipped = not agreed
        if not agreed:
            self.skipped.append((step, f"ranks disagree: step/sums/maxima/layout from "
                                       f"{lo} to {hi}; statistics of this step stay local"))
            return sums, maxes
        total = torch.cat([sums, torch.ones(1, dtype=sums.dtype, device=sums.device)])
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.group)
        reduced, active = total[:-1], total[-1:]
        if averaged is not None:
            reduced = torch.where(averaged.to(reduced.device), reduced / active, reduced)
        maxes = maxes.clone()
        if maxes.numel():
            dist.all_reduce(maxes, op=dist.ReduceOp.MAX, group=self.group)
        return reduced, maxes

    def _handshake(self, info: torch.Tensor | None) -> tuple[bool, tuple[list[float], list[float]]]:
        """MAX all-reduce of (info, -info); None for a rank with nothing to say (joined)."""
        if info is None:
            buf = torch.full((2 * _HANDSHAKE,), -math.inf, dtype=torch.float64,
                             device=self._device)
        else:
            buf = torch.cat([info, -info])
        dist.all_reduce(buf, op=dist.ReduceOp.MAX, group=self.group)
        hi, lo = buf[:_HANDSHAKE].tolist(), (-buf[_HANDSHAKE:]).tolist()
        return hi == lo, (hi, lo)

    def shadow(self) -> None:
        """Take part in one reduction with neutral values (this rank has no batch)."""
        agreed, (hi, _) = self._handshake(None)
        if not agreed:  # the active ranks skip this reduction too
            return
        _, n_sums, n_maxes, _ = (int(v) for v in hi)
        zeros = torch.zeros(n_sums + 1, dtype=torch.float64, device=self._device)
        dist.all_reduce(zeros, op=dist.ReduceOp.SUM, group=self.group)
        if n_maxes:
            lows = torch.full((n_maxes,), -math.inf, dtype=torch.float64, device=self._device)
            dist.all_reduce(lows, op=dist.ReduceOp.MAX, group=self.group)

    # -- uneven inputs: torch.distributed.algorithms.join.Join ---------------------------------
    def join_hook(self, **kwargs: Any) -> JoinHook:
        return _ShadowHook(self)

    @property
    def join_device(self) -> torch.device:
        return self._device

    @property
    def join_process_group(self) -> Any:
        return self.group if self.group is not None else dist.group.WORLD


class _ShadowHook(JoinHook):
    """Once per iteration of the ranks still training: shadow their reduction if the schedule
    says that step has one."""

    def __init__(self, reducer: RankReducer) -> None:
        self.reducer = reducer

    def main_hook(self) -> None:
        step = self.reducer.step
        if self.reducer.is_stats_step(step):
            self.reducer.shadow()
        self.reducer.step = step + 1


def averaged_mask(kinds: Iterable[str], sizes: Iterable[int], device: torch.device
                  ) -> torch.Tensor:
    """A boolean mask over a flat sums buffer: True where the accumulator's kind is averaged."""
    flags = [kind in AVERAGED_KINDS for kind, n in zip(kinds, sizes) for _ in range(n)]
    return torch.tensor(flags, dtype=torch.bool, device=device)


__all__ = ["AVERAGED_KINDS", "Join", "RankReducer", "averaged_mask", "is_main_process",
           "layout_checksum", "rank", "unwrap", "world_size"]
