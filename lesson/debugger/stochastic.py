"""Is evaluation deterministic? A probe for random layers left on at evaluation however applied.

`model.eval()` switches nn.Dropout off, but not `F.dropout(x, training=True)`, nor
`F.dropout(x)` (its default is training=True), nor any other random op in forward. No module
mode shows those; the outputs do: an evaluation pass must give the same output twice. On the
first `PROBES` evaluation passes (model in eval mode or gradients off, and no mode-dependent
module in training mode, which the mode rule already reports), the probe runs the model's
forward twice more on the first `PROBE_SAMPLES` samples, under two different random seeds, with
the caller's random state saved and restored, and records whether the two outputs differ.
The root's hooks do not run for the probe (it calls `forward` itself), so no bookkeeping counts it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

#: evaluation passes probed per run (each costs two forwards of PROBE_SAMPLES samples)
PROBES = 3
PROBE_SAMPLES = 8
#: outputs "differ" when they disagree by more than this share of their scale
RELATIVE_TOLERANCE = 1e-4


@dataclass
class StochasticEvalEvidence:
    """What the probes saw: how many ran, how many found two different outputs, the largest gap."""

    probes: int = 0
    differed: int = 0
    first_step: int | None = None
    max_relative_diff: float = 0.0


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, dict) else value \
        if isinstance(value, (list, tuple)) else ()
    for v in items:
        t = _first_tensor(v)
        if t is not None:
            return t
    return None


def _slice(value: Any, n: int, k: int) -> Any:
    """The first k samples of every tensor whose leading dimension is the batch (n)."""
    if isinstance(value, torch.Tensor):
        return value[:k] if value.dim() > 0 and value.shape[0] == n else value
    if isinstance(value, (list, tuple)):
        return type(value)(_slice(v, n, k) for v in value)
    if isinstance(value, dict):
        return {key: _slice(v, n, k) for key, v in value.items()}
    return value


class EvalDeterminismProbe:
    """Call `probe.observe` from the root module's forward pre-hook (with_kwargs=True)."""

    def __init__(self, model: nn.Module, mode_modules: list[nn.Module],
                 step: Callable[[], int], on_error: Callable[[str, Exception], None]) -> None:
        self.model, self.mode_modules = model, mode_modules
        self._step, self._on_error = step, on_error
        self.evidence = StochasticEvalEvidence()
        self._busy = False

    def _evaluating(self) -> bool:
        return (not torch.is_grad_enabled() or not self.model.training) \
            and not any(m.training for m in self.mode_modules)

    def observe(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Before an evaluation pass (the first PROBES of them): run it twice more."""
        if self._busy or self.evidence.probes >= PROBES or not self._evaluating():
            return
        x = _first_tensor(args) if args else _first_tensor(kwargs)
        if x is None or x.dim() == 0 or x.shape[0] < 1:
            return
        self._busy = True
        try:
            self._probe(module, _slice(args, x.shape[0], PROBE_SAMPLES),
                        _slice(kwargs, x.shape[0], PROBE_SAMPLES), x.device)
        except Exception as exc:            # a model the probe cannot re-run: stop probing
            self.evidence.probes = PROBES
            self._on_error("evaluation determinism probe", exc)
        finally:
            self._busy = False

    def _probe(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
               device: torch.device) -> None:
        devices = [device.index or 0] if device.type == "cuda" else []
        outs = []
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            for seed in (1, 2):
                torch.manual_seed(seed)
                out = _first_tensor(module.forward(*args, **kwargs))
                if out is None or not out.is_floating_point():
                    return
                outs.append(out.detach())
        a, b = outs
        scale = torch.maximum(a.abs().amax(), b.abs().amax()).clamp_min(1e-30)
        finite = torch.isfinite(a) & torch.isfinite(b)
        rel = float(((a - b).abs() * finite).amax() / scale)    # one host sync, on probes only
        ev = self.evidence
        ev.probes += 1
        if rel > RELATIVE_TOLERANCE:
            ev.differed += 1
            ev.max_relative_diff = max(ev.max_relative_diff, rel)
            if ev.first_step is None:
                ev.first_step = self._step()
