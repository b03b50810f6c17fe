"""Where the debugger's statistics go in a real training job: JSON Lines, TensorBoard, W&B.

A sink receives the debugger's records (plain numbers, see `lesson.debugger.monitor`) and, if it asks
for them, histograms of weights, gradients and activations. Histograms are summarised on the
tensors' own device and fetched in one host transfer (`summarize`), and only at log steps.

Non-finite values are never dropped silently: scalars are written as NaN/Inf, and because
histograms cannot hold NaN or Inf, every histogram `<tag>` comes with a scalar
`<tag>/nonfinite` that counts the values left out of it.

TensorBoard and wandb are optional extras (`pip install nndebug[logging]`), imported only when
their sink is built. `JSONLSink` needs nothing beyond the standard library.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, runtime_checkable

import torch
from torch import nn

#: How many bins every histogram gets (wandb.watch uses 64 as well).
BINS = 64


# -- what a record holds, as flat scalar tags ----------------------------------------------------

def flatten_record(record: Mapping[str, Any]) -> dict[str, float]:
    """The record's numbers as `{tag: value}`: `loss`, `lr`, `activations/<layer>/<stat>`,
    `params/<name>/<stat>`. Statistics that do not apply (None) are left out; NaN and Inf
    stay in, as the values they are."""
    flat: dict[str, float] = {}
    for key in ("loss", "lr"):
        if record.get(key) is not None:
            flat[key] = float(record[key])
    for group, prefix in (("layers", "activations"), ("params", "params")):
        for name, stats in record.get(group, {}).items():
            for stat, value in stats.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue  # None, or a label such as the layer's kind
                flat[f"{prefix}/{name}/{stat}"] = float(value)
    return flat


# -- histograms, summarised on the device -------------------------------------------------------

@dataclass(frozen=True)
class Histogram:
    """The finite values of one tensor in `len(counts)` equal bins, plus what was left out."""

    edges: list[float]
    counts: list[float]
    min: float
    max: float
    num: int
    sum: float
    sum_squares: float
    nonfinite: int


def _histogram_row(t: torch.Tensor, bins: int) -> torch.Tensor:
    """[min, max, num, sum, sum_squares, nonfinite, counts...] of `t`, on its device, no sync."""
    x = t.detach().reshape(-1)
    x = x.to(torch.float32 if x.device.type == "mps" else torch.float64)  # mps has no float64
    finite = torch.isfinite(x)
    inf = torch.tensor(math.inf, dtype=x.dtype, device=x.device)
    lo = torch.where(finite, x, inf).amin() if x.numel() else inf
    hi = torch.where(finite, x, -inf).amax() if x.numel() else -inf
    width = (hi - lo).clamp_min(1e-300) / bins
    index = torch.nan_to_num((x - lo) / width, nan=0.0, posinf=0.0, neginf=0.0)
    index = index.floor().clamp(0, bins - 1).long()
    index = torch.where(finite, index, torch.full_like(index, bins))  # a bin for the dropped
    counts = torch.bincount(index, minlength=bins + 1)[:bins].to(x.dtype)
    kept = torch.where(finite, x, torch.zeros_like(x))
    head = torch.stack([lo, hi, finite.sum().to(x.dtype), kept.sum(), (kept * kept).sum(),
                        (~finite).sum().to(x.dtype)])
    return torch.cat([head, counts])


def summarize(tensors: Mapping[str, torch.Tensor], bins: int = BINS) -> dict[str, Histogram]:
    """Histogram every tensor over its finite values, in one host transfer for all of them."""
    if not tensors:
        return {}
    rows = [_histogram_row(t, bins) for t in tensors.values()]
    device = rows[0].device
    rows = torch.stack([r.to(device=device, dtype=rows[0].dtype) for r in rows]).tolist()
    out: dict[str, Histogram] = {}
    for tag, row in zip(tensors, rows):
        lo, hi, num, total, squares, nonfinite = row[:6]
        if num == 0:
            lo = hi = 0.0
        step = (hi - lo) / bins
        edges = [lo + i * step for i in range(bins)] + [hi]
        out[tag] = Histogram(edges, row[6:], lo, hi, int(num), total, squares, int(nonfinite))
    return out


def sample_values(t: torch.Tensor, k: int) -> torch.Tensor:
    """At most `k` values of `t`, evenly strided over it, as a small detached copy: what an
    activation hook may keep for a histogram without holding on to the batch."""
    flat = t.detach().reshape(-1)
    stride = max(1, flat.numel() // k)
    return flat[::stride][:k].clone()


def model_tensors(model: nn.Module,
                  activations: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The tensors worth a histogram: `weights/<name>`, `gradients/<name>` (those that have a
    gradient) and `activations/<layer>` (whatever sample of outputs the caller kept)."""
    tensors: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        tensors[f"weights/{name}"] = p
        if p.grad is not None:
            tensors[f"gradients/{name}"] = p.grad
    for name, a in (activations or {}).items():
        tensors[f"activations/{name}"] = a
    return tensors


# -- the sinks ----------------------------------------------------------------------------------

@runtime_checkable
class Sink(Protocol):
    """Anything with `write(record, histograms)` and `close()`; `wants_histograms` says whether
    the caller should pay for histograms at all."""

    wants_histograms: bool

    def write(self, record: Mapping[str, Any],
              histograms: Mapping[str, Histogram] | None = None) -> None: ...

    def close(self) -> None: ...


def _json_safe(value: Any) -> Any:
    """Standard JSON has no NaN or Inf: write them as the strings "NaN", "Infinity", "-Infinity"
    (the spelling JavaScript and wandb use), so every JSON reader can load the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _json_restore(value: Any) -> Any:
    if isinstance(value, str) and value in _NONFINITE:
        return _NONFINITE[value]
    if isinstance(value, dict):
        return {k: _json_restore(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_restore(v) for v in value]
    return value


class JSONLSink:
    """One JSON object per log step, appended to a file and flushed, so a crashed job keeps
    every step it logged. Read it back with `read_jsonl`.

    The file is opened at the first write, so a sink built on every rank of a distributed job
    leaves no empty file on the ranks that never log."""

    def __init__(self, path: str | os.PathLike[str], *, histograms: bool = False,
                 append: bool = False) -> None:
        self.path = Path(path)
        self.wants_histograms = histograms
        self._mode = "a" if append else "w"
        self._file: Any = None

    def write(self, record: Mapping[str, Any],
              histograms: Mapping[str, Histogram] | None = None) -> None:
        line = dict(record)
        if histograms:
            line["histograms"] = {tag: asdict(h) for tag, h in histograms.items()}
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, self._mode, encoding="utf-8")
        self._file.write(json.dumps(_json_safe(line), allow_nan=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records a `JSONLSink` wrote, with NaN and Inf turned back into floats."""
    with open(path, encoding="utf-8") as f:
        return [_json_restore(json.loads(line)) for line in f if line.strip()]


class TensorBoardSink:
    """Scalars and histograms through `torch.utils.tensorboard.SummaryWriter`.

    Pass a `log_dir` (a writer is made at the first write and closed by `close()`) or your
    own `writer`."""

    def __init__(self, log_dir: str | os.PathLike[str] | None = None, *, writer: Any = None,
                 histograms: bool = True) -> None:
        if writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as err:  # tensorboard is an optional extra
                raise ImportError("TensorBoardSink needs tensorboard: "
                                  "pip install 'nndebug[logging]'") from err
            self._make_writer: Callable[[], Any] | None = lambda: SummaryWriter(
                log_dir=None if log_dir is None else str(log_dir))
        else:
            self._make_writer = None
        self._owns_writer = writer is None
        self.writer = writer
        self.wants_histograms = histograms

    def write(self, record: Mapping[str, Any],
              histograms: Mapping[str, Histogram] | None = None) -> None:
        if self.writer is None and self._make_writer is not None:
            self.writer = self._make_writer()
        step = int(record["step"])
        for tag, value in flatten_record(record).items():
            self.writer.add_scalar(tag, value, step)
        for tag, h in (histograms or {}).items():
            self.writer.add_scalar(f"{tag}/nonfinite", h.nonfinite, step)
            if h.num:
                self.writer.add_histogram_raw(
                    tag, min=h.min, max=h.max, num=h.num, sum=h.sum,
                    sum_squares=h.sum_squares, bucket_limits=h.edges[1:],
                    bucket_counts=h.counts, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is None:
            return
        if self._owns_writer:
            self.writer.close()
            self.writer = None
        else:
            self.writer.flush()


class WandbSink:
    """Scalars and histograms logged to a Weights & Biases run at the record's step.

    Pass your own `run`, or keyword arguments for `wandb.init` (e.g. `project=`, `mode=
    "offline"`): the run is then started at the first write (so only the rank that logs
    starts one) and finished by `close()`."""

    def __init__(self, run: Any = None, *, histograms: bool = True, **init_kwargs: Any) -> None:
        try:
            import wandb
        except ImportError as err:  # wandb is an optional extra
            raise ImportError("WandbSink needs wandb: pip install 'nndebug[logging]'") from err
        self._wandb = wandb
        self._owns_run = run is None
        self._init_kwargs = init_kwargs
        self.run = run
        self.wants_histograms = histograms

    def write(self, record: Mapping[str, Any],
              histograms: Mapping[str, Histogram] | None = None) -> None:
        if self.run is None:
            self.run = self._wandb.init(**self._init_kwargs)
        data: dict[str, Any] = dict(flatten_record(record))
        for tag, h in (histograms or {}).items():
            data[f"{tag}/nonfinite"] = h.nonfinite
            if h.num:
                data[tag] = self._wandb.Histogram(np_histogram=(h.counts, h.edges))
        self.run.log(data, step=int(record["step"]))

    def close(self) -> None:
        if self._owns_run and self.run is not None:
            self.run.finish()
            self.run = None


# -- the glue between the debugger and its sinks ------------------------------------------------

class SinkLogger:
    """A debugger callback: every `log_every` steps, hand the record (and, if any sink wants
    them, histograms of the tensors `tensors()` returns) to each sink."""

    def __init__(self, sinks: Iterable[Sink], log_every: int,
                 tensors: Callable[[], Mapping[str, torch.Tensor]] | None = None) -> None:
        if isinstance(log_every, bool) or not isinstance(log_every, int) or log_every < 1:
            raise ValueError(f"log_every must be a positive int, got {log_every!r}")
        self.sinks = list(sinks)
        for sink in self.sinks:
            if not (callable(getattr(sink, "write", None)) and callable(getattr(sink, "close", None))):
                raise TypeError(f"a sink needs write(record, histograms) and close(); "
                                f"got {type(sink).__name__}")
        self.log_every = log_every
        self.tensors = tensors
        self.wants_histograms = tensors is not None and any(
            getattr(s, "wants_histograms", False) for s in self.sinks)

    def is_log_step(self, step: int) -> bool:
        return step % self.log_every == 0

    def __call__(self, record: Mapping[str, Any]) -> None:
        if not self.is_log_step(int(record["step"])):
            return
        histograms = summarize(self.tensors()) if self.wants_histograms and self.tensors else None
        if histograms and isinstance(record, dict):  # kept with the record for plot_activations
            record["histograms"] = {tag: asdict(h) for tag, h in histograms.items()
                                    if tag.startswith("activations/")}
        for sink in self.sinks:
            sink.write(record, histograms if getattr(sink, "wants_histograms", False) else None)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
