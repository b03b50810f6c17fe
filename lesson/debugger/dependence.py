"""Which outputs depend on which inputs: change part of the input, see which outputs move.

Two silent bugs of sequence models are dependencies that must not exist:

* a **causal leak**: in a next-token model, output position t must be a function of inputs
  0..t only. A missing, wrong or too weak causal mask lets it read input t+1, the very token
  it is trained to predict, and the training loss falls below what the data allows;
* **batch mixing**: output sample i must be a function of input sample i only. A transformer
  built without `batch_first=True`, or an RNN fed (batch, time, features) as (time, batch,
  features), runs its attention or recurrence along the batch.

Both are found the same way, by perturbation (it works for integer token ids, where a gradient
with respect to the input does not exist): build a batch of *variants* of one input, each with
one region changed, run it beside a *reference* batch of unchanged copies (same batch size,
same random seed, eval mode, no gradients), and compare the two outputs row by row. Variant r
changes the inputs after position k_r; any output at a position <= k_r that moved depends on
the future. The first position that moved is the first leaking position. A second run with
forward hooks on every module names the module where the dependence first appears: the first
one (in the order modules finish) whose output moves while its input did not.

Rows of one batch are compared with the same rows of the other, so a model that mixes its batch
cannot pass its mixing off as a leak: when even the unchanged control row moves, every variant
is run again on its own. The model is restored bitwise afterwards (lesson.restore.preserved)
and the caller's random state is kept (torch.random.fork_rng).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from lesson.restore import preserved

RELATIVE_CHANGE = 1e-5
"""An output "moved" when it changed by more than this share of the largest output value. Rows
computed in the same place of batches of the same size are bitwise equal in a model without
the dependence (a mask of -inf gives an exact 0 weight); float32 round-off between otherwise
equal computations stays below 1e-6. A mask too weak to be a mask (a bias of -10 before the
softmax) leaks e^-10 = 4.5e-5 of a value, just above."""

MAX_VARIANTS = 32
"""Variants per forward pass: the probe runs batches of at most this many rows (plus a control
row), about the size of one training batch."""

SHARED_MASKS = ("attn_mask", "src_mask", "tgt_mask", "memory_mask", "causal_mask")
"""Keyword names (and `mask`) of (T, T) masks over positions that every sample shares (when
the batch has T rows too, the name tells them from per-sample tensors)."""

SOURCES_REPORTED = 8
"""How many of the later inputs that the first leaking output reads the evidence lists."""


# -- calling the model on a batch built from rows of the user's batch -----------------------------
def primary_output(out: Any) -> torch.Tensor | None:
    """The model's prediction: a tensor, `.logits` (HF-style objects), a dict's 'logits', or
    the first floating-point tensor of a tuple, list or dict."""
    if isinstance(out, torch.Tensor):
        return out if out.is_floating_point() else None
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(out, dict):
        if isinstance(out.get("logits"), torch.Tensor):
            return out["logits"]
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        for item in out:
            found = primary_output(item)
            if found is not None:
                return found
    return None


@dataclass
class Call:
    """A forward call of the model, with the sequence tensor taken out so it can be swapped.

    `where` is the sequence's place: an index into `args` or a keyword of `kwargs`. Every other
    tensor whose `batch_dim` (or, failing that, first) dimension has the batch's size is taken
    to be per sample (a padding mask, a source sentence) and is cut to the same rows."""

    inputs: torch.Tensor
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    where: int | str = 0
    batch_dim: int = 0
    time_dim: int | None = 1

    @property
    def batch_size(self) -> int:
        return self.inputs.shape[self.batch_dim]

    @property
    def length(self) -> int:
        return 1 if self.time_dim is None else self.inputs.shape[self.time_dim]

    def _rows(self, value: Any, rows: torch.Tensor, name: str | None = None) -> Any:
        n = self.batch_size
        if isinstance(value, torch.Tensor) and value.dim() == 2 \
                and value.shape == (self.length, self.length) \
                and (n != self.length or name == "mask"
                     or (name or "").endswith(SHARED_MASKS)):
            return value                    # an attention mask over positions: shared
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            if value.dim() > self.batch_dim and value.shape[self.batch_dim] == n:
                return value.index_select(self.batch_dim, rows.to(value.device))
            if value.shape[0] == n:
                return value.index_select(0, rows.to(value.device))
            return value
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            return type(value)(self._rows(v, rows) for v in value)
        if isinstance(value, dict):
            return {k: self._rows(v, rows) for k, v in value.items()}
        return value

    def run(self, model: nn.Module, sequence: torch.Tensor, rows: torch.Tensor) -> Any:
        """model(...) with `sequence` in the sequence's place and the other per-sample tensors
        cut to `rows` of the user's batch."""
        args = [self._rows(a, rows) for a in self.args]
        kwargs = {k: self._rows(v, rows, k) for k, v in self.kwargs.items()}
        if isinstance(self.where, int):
            args.insert(self.where, sequence)
        else:
            kwargs[self.where] = sequence
        return model(*args, **kwargs)


def perturbed(x: torch.Tensor, change: torch.Tensor, vocabulary: torch.Tensor | None,
              generator: torch.Generator) -> torch.Tensor:
    """`x` with the entries where `change` is True replaced: token ids by another id of
    `vocabulary` (never the same one), features by themselves plus noise of their own scale."""
    out = x.clone()
    if not x.is_floating_point():
        vocab = vocabulary if vocabulary is not None else torch.unique(x)
        vocab = vocab.to(x.device)
        where = torch.searchsorted(vocab, x.contiguous()).clamp_max(len(vocab) - 1)
        shift = torch.randint(1, len(vocab), x.shape, generator=generator).to(x.device)
        other = vocab[(where + shift) % len(vocab)]
        return torch.where(change, other, out)
    scale = x.detach().float().std().clamp_min(1e-3) if x.numel() > 1 else x.new_tensor(1.0)
    noise = torch.randn(x.shape, generator=generator).to(x.device, x.dtype)
    return torch.where(change, x + (noise * scale).to(x.dtype), out)


def vocabulary_of(model: nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    """The token ids a perturbation may use: those of the batch, or, when the batch holds
    a single id, every id of the first embedding table that can take them."""
    if x.is_floating_point():
        return None
    ids = torch.unique(x)
    if len(ids) >= 2:
        return ids
    for m in model.modules():
        if isinstance(m, nn.Embedding) and m.num_embeddings > int(x.max()):
            return torch.arange(m.num_embeddings, device=x.device)
    raise ValueError("every token of the batch is the same id and no embedding table says "
                     "which others exist: the probe cannot change a token")


@dataclass
class Moved:
    """How much each (row, position) of the output moved: `table[r, t]`, relative."""

    table: torch.Tensor          # (rows, positions) on the host, float64
    control_moved: bool          # the unchanged control row moved: the batch mixes its rows


def unflattened(t: torch.Tensor, n: int, length: int, batch_dim: int) -> torch.Tensor:
    """A (rows x positions, ...) output, as language models often return their logits for the
    loss, laid out again as (rows, positions, ...) (or (positions, rows, ...) for time-first
    inputs); other tensors as they are."""
    if length > 1 and t.dim() >= 1 and t.shape[0] == n * length and n not in t.shape:
        shape = (n, length) if batch_dim == 0 else (length, n)
        return t.reshape(*shape, *t.shape[1:])
    return t


def _axes(t: torch.Tensor, n: int, length: int, batch_dim: int,
          time_dim: int | None) -> tuple[int, int | None] | None:
    """(batch axis, time axis) of a tensor computed from a batch of `n` rows of `length`
    positions: the input's own axes when their sizes match, else the first axes that do."""
    if t.dim() == 0:
        return None
    b = batch_dim if t.dim() > batch_dim and t.shape[batch_dim] == n else next(
        (d for d in range(t.dim()) if t.shape[d] == n), None)
    if b is None:
        return None
    if time_dim is None:
        return b, None
    if t.dim() > time_dim and time_dim != b and t.shape[time_dim] == length:
        return b, time_dim
    tm = next((d for d in range(t.dim()) if d != b and t.shape[d] == length), None)
    return b, tm


def movement(a: torch.Tensor, b: torch.Tensor, axes: tuple[int, int | None]) -> torch.Tensor:
    """|a - b| per (row, position), relative to the largest |a|, as (rows, positions)."""
    bdim, tdim = axes
    diff = (a.detach().float() - b.detach().float()).abs()
    diff = torch.nan_to_num(diff, nan=0.0, posinf=0.0)
    both_nan = torch.isnan(a) & torch.isnan(b)
    one_nan = torch.isnan(a) ^ torch.isnan(b)
    diff = torch.where(both_nan, 0.0, torch.where(one_nan, float("inf"), diff))
    scale = torch.nan_to_num(a.detach().float().abs(), nan=0.0, posinf=0.0).amax().clamp_min(1e-30)
    order = [bdim] + ([tdim] if tdim is not None else [])
    moved = diff.permute(*order, *[d for d in range(diff.dim()) if d not in order])
    moved = moved.reshape(moved.shape[0], moved.shape[1] if tdim is not None else 1, -1)
    return (moved.amax(dim=2) / scale).cpu().double()


class _Recorder:
    """Forward hooks on every module: the first tensor of each call's input and output, in the
    order the calls finish (a reference run), then compared call by call (a variant run)."""

    def __init__(self, model: nn.Module) -> None:
        self.names = {m: n or type(m).__name__ for n, m in model.named_modules()}
        self.calls: list[tuple[str, torch.Tensor | None, torch.Tensor | None]] = []
        self.handles = [m.register_forward_hook(self._hook, with_kwargs=True)
                        for m in self.names]

    def _hook(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
              output: Any) -> None:
        x = _first(args) if args else _first(kwargs)
        self.calls.append((self.names[module], x, primary_output(output)))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _first(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value.detach()
    items = value.values() if isinstance(value, dict) else value \
        if isinstance(value, (list, tuple)) else ()
    for v in items:
        t = _first(v)
        if t is not None:
            return t
    return None


@dataclass
class Probe:
    """Runs reference and variant batches of one model under one seed (see the module doc)."""

    model: nn.Module
    call: Call
    seed: int = 0

    def _forward(self, sequence: torch.Tensor, rows: torch.Tensor) -> Any:
        device = sequence.device
        devices = [device.index or 0] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.seed)
            return self.call.run(self.model, sequence, rows)

    @torch.no_grad()
    def compare(self, reference: torch.Tensor, variants: torch.Tensor, rows: torch.Tensor
                ) -> Moved:
        """How far each row's output moved from `reference` (same rows, unchanged) to
        `variants`, whose first and last rows must be unchanged: the controls (a batch mixed
        causally along its rows moves the last one, the other way the first)."""
        call = self.call
        out_ref = primary_output(self._forward(reference, rows))
        out_var = primary_output(self._forward(variants, rows))
        if out_ref is None or out_var is None:
            raise TypeError("the model's output holds no floating-point tensor to compare")
        n = reference.shape[call.batch_dim]
        out_ref, out_var = (unflattened(t, n, call.length, call.batch_dim)
                            for t in (out_ref, out_var))
        axes = _axes(out_ref, n, call.length, call.batch_dim, call.time_dim)
        if axes is None:
            raise ValueError(f"the model's output (shape {tuple(out_ref.shape)}) has no "
                             f"dimension of the batch's {n} rows")
        table = movement(out_var, out_ref, axes)
        return Moved(table, bool(max(table[0].max(), table[-1].max()) > RELATIVE_CHANGE))

    @torch.no_grad()
    def compare_one_by_one(self, reference: torch.Tensor, variants: torch.Tensor,
                           rows: torch.Tensor) -> Moved:
        """As `compare`, each variant in a batch of its own beside the reference alone: for
        models that mix the rows of a batch (their mixing is found by another probe)."""
        call = self.call
        one = lambda t, i: t.narrow(call.batch_dim, i, 1)  # noqa: E731
        out_ref = primary_output(self._forward(one(reference, 0), rows[:1]))
        if out_ref is None:
            raise TypeError("the model's output holds no floating-point tensor to compare")
        out_ref = unflattened(out_ref, 1, call.length, call.batch_dim)
        axes = _axes(out_ref, 1, call.length, call.batch_dim, call.time_dim)
        if axes is None:
            raise ValueError(f"the model's output (shape {tuple(out_ref.shape)}) has no batch "
                             "dimension")
        tables = []
        for i in range(variants.shape[call.batch_dim]):
            out = primary_output(self._forward(one(variants, i), rows[i:i + 1]))
            out = unflattened(out, 1, call.length, call.batch_dim)
            tables.append(movement(out, out_ref, axes))
        return Moved(torch.cat(tables), False)

    @torch.no_grad()
    def first_module(self, reference: torch.Tensor, variants: torch.Tensor, rows: torch.Tensor,
                     leaked: Callable[[torch.Tensor], bool], *, need_time: bool = True
                     ) -> tuple[str | None, list[str]]:
        """The module where the dependence appears: the first (in the order calls finish)
        whose output moved, `leaked(table)`, while its input did not; and the modules whose
        output moved, in that order. `leaked` reads a (rows, positions) movement table."""
        call = self.call
        n = reference.shape[call.batch_dim]
        runs = []
        for batch in (reference, variants):
            recorder = _Recorder(self.model)
            try:
                self._forward(batch, rows)
            finally:
                recorder.remove()
            runs.append(recorder.calls)
        culprit, moved_modules = None, []
        for (name, x_ref, y_ref), (_, x_var, y_var) in zip(*runs):
            if y_ref is None or y_var is None or y_ref.shape != y_var.shape:
                continue
            y_ref, y_var = (unflattened(t, n, call.length, call.batch_dim)
                            for t in (y_ref, y_var))
            axes = _axes(y_ref, n, call.length, call.batch_dim, call.time_dim)
            if axes is None or (need_time and axes[1] is None):
                continue
            if not leaked(movement(y_var, y_ref, axes)):
                continue
            moved_modules.append(name)
            x_moved = False
            if x_ref is not None and x_var is not None and x_ref.shape == x_var.shape \
                    and x_ref.is_floating_point():
                x_axes = _axes(x_ref, n, call.length, call.batch_dim, call.time_dim)
                x_moved = x_axes is not None and (x_axes[1] is not None or not need_time) \
                    and leaked(movement(x_var, x_ref, x_axes))
            if culprit is None and not x_moved:
                culprit = name
        return culprit or (moved_modules[0] if moved_modules else None), moved_modules


# -- causality -------------------------------------------------------------------------------------
@dataclass
class CausalLeak:
    """The first output position that depends on later inputs, and where that comes from."""

    position: int                       # the first output position that reads the future
    sources: list[int]                  # later input positions it reads (up to SOURCES_REPORTED)
    module: str | None                  # where the dependence first appears
    modules: list[str]                  # every module whose output showed it, in order
    positions_checked: int
    length: int
    relative_change: float              # how much the leaking output moved
    leaking_positions: list[int]        # the checked positions found leaking


def _spread(candidates: list[int], cap: int) -> list[int]:
    """Up to `cap` of the sorted `candidates`: all when they fit, else the first quarter of the
    cap and then evenly spread over the rest (a leak at every position, the usual one, shows at
    the first)."""
    if len(candidates) <= cap:
        return candidates
    head = candidates[:cap // 4]
    rest = candidates[cap // 4:]
    step = len(rest) / (cap - len(head))
    return head + [rest[min(len(rest) - 1, int(i * step))] for i in range(cap - len(head))]


def _stack_rows(rows: list[torch.Tensor], batch_dim: int) -> torch.Tensor:
    return torch.cat(rows, dim=batch_dim)


def causal_leak(model: nn.Module, call: Call, *, sample: int = 0, seed: int = 0,
                max_variants: int = MAX_VARIANTS, one_by_one: bool = False
                ) -> CausalLeak | None:
    """Does any output position of sample `sample` depend on inputs after it? None when not.
    The model runs in eval mode and is restored bitwise (see the module doc). `one_by_one`:
    run each variant in a batch of its own from the start (for a model known to mix its
    batch, whose mixing the controls might not see)."""
    if call.time_dim is None:
        raise ValueError("a causality check needs a time dimension")
    x = call.inputs
    length, bdim, tdim = call.length, call.batch_dim, call.time_dim
    row = x.narrow(bdim, sample, 1)
    generator = torch.Generator().manual_seed(seed)
    with preserved(model):
        model.eval()
        vocab = vocabulary_of(model, x)
        probe = Probe(model, call, seed)
        positions = torch.arange(length, device=x.device)
        shape = [1] * x.dim()
        shape[tdim] = length

        def variants_for(splits: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            count = len(splits) + 2   # the variants between two controls
            if count == length:       # keep the batch axis apart from the time axis
                count += 1
            rows = torch.full((count,), sample, dtype=torch.long)
            reference = row.expand(*[count if d == bdim else -1 for d in range(x.dim())])
            reference = reference.contiguous()
            changed = [row] + [perturbed(row, (positions > k).reshape(shape).expand_as(row),
                                         vocab, generator) for k in splits]
            changed += [row] * (count - len(changed))
            return reference, _stack_rows(changed, bdim), rows

        def leaks_in(table: torch.Tensor, splits: list[int]) -> dict[int, tuple[int, float]]:
            """split -> (first moved position <= split, its movement)."""
            found = {}
            for r, k in enumerate(splits, start=1):
                moved = torch.nonzero(table[r, :k + 1] > RELATIVE_CHANGE).flatten()
                if len(moved):
                    t = int(moved[0])
                    found[k] = (t, float(table[r, t]))
            return found

        def measure(splits: list[int]) -> dict[int, tuple[int, float]]:
            reference, variants, rows = variants_for(splits)
            moved = probe.compare(reference, variants, rows) if not one_by_one else None
            if moved is None or moved.control_moved:
                moved = probe.compare_one_by_one(reference, variants, rows)
            return leaks_in(moved.table, splits)

        # every split point when they fit in one batch; otherwise a spread of them (a healthy
        # model costs this one round), then, once a leak is found, every split below it (a
        # leak that crosses no checked split, one position reading the next, is found at its
        # own split only)
        checked: list[int] = []
        splits = _spread(list(range(length - 1)), max_variants)
        checked += splits
        leaks = measure(splits)
        while leaks:
            first = min(t for t, _ in leaks.values())
            below = [k for k in range(first) if k not in checked]
            if not below:
                break
            splits = below[-max_variants:]        # nearest the known leak first
            checked += splits
            leaks |= measure(splits)
        if not leaks:
            return None
        position = min(t for t, _ in leaks.values())
        change = max(c for t, c in leaks.values() if t == position)
        # which later inputs does it read? one variant per later position
        later = list(range(position + 1, length))[:max_variants]
        count = len(later) + 2 + (len(later) + 2 == length)
        reference = row.expand(*[count if d == bdim else -1 for d in range(x.dim())]).contiguous()
        singles = [row] + [perturbed(row, (positions == j).reshape(shape).expand_as(row), vocab,
                                     generator) for j in later]
        singles += [row] * (count - len(singles))
        rows = torch.full((count,), sample, dtype=torch.long)
        variants = _stack_rows(singles, bdim)
        moved = probe.compare(reference, variants, rows) if not one_by_one else None
        if moved is None or moved.control_moved:
            moved = probe.compare_one_by_one(reference, variants, rows)
        sources = [j for r, j in enumerate(later, start=1)
                   if moved.table[r, position] > RELATIVE_CHANGE][:SOURCES_REPORTED]
        # where it appears: the variant that changes everything after `position`
        ref_m, var_m, rows_m = variants_for([position])

        def leaked(table: torch.Tensor) -> bool:
            return bool(table.shape[1] > position and table[1, :position + 1].max()
                        > RELATIVE_CHANGE)
        try:
            module, modules = probe.first_module(ref_m, var_m, rows_m, leaked)
        except Exception:          # naming the module is a bonus: the leak stands without it
            module, modules = None, []
    return CausalLeak(position, sources, module, modules[:8], len(checked), length, change,
                      sorted(t for t, _ in leaks.values()))


# -- batch independence ------------------------------------------------------------------------
@dataclass
class BatchLeak:
    """Output rows that moved when only another row's input changed."""

    changed_row: int
    moved_rows: list[int]
    rows_checked: int
    module: str | None
    modules: list[str]
    relative_change: float


def batch_leak(model: nn.Module, call: Call, *, max_rows: int = 8, seed: int = 0,
               pad_id: int | None = None) -> BatchLeak | None:
    """Does changing sample 0 move the outputs of the other samples? None when not. Up to
    `max_rows` samples of the batch are used (never as many as the sequence's positions, so
    the two axes stay apart). With `pad_id`, sample 0's padding stays padding and no token
    becomes one: its content changes, not its length (an output that depends on the batch's
    longest row is a padding bug, PADDED_POSITION_READ or ATTENTION_ON_PADDING, not this)."""
    x = call.inputs
    n = min(call.batch_size, max_rows)
    if call.time_dim is not None and n == call.length:
        n -= 1
    if n < 2:
        raise ValueError(f"need at least 2 samples along batch_dim={call.batch_dim} to test "
                         "batch independence")
    rows = torch.arange(n)
    generator = torch.Generator().manual_seed(seed)
    with preserved(model):
        model.eval()
        vocab = vocabulary_of(model, x)
        reference = x.index_select(call.batch_dim, rows.to(x.device))
        change = torch.zeros_like(reference, dtype=torch.bool)
        change.narrow(call.batch_dim, 0, 1).fill_(True)
        if pad_id is not None and vocab is not None and int((vocab != pad_id).sum()) >= 2:
            vocab = vocab[vocab != pad_id]
            change &= reference != pad_id
        variant = perturbed(reference, change, vocab, generator)
        probe = Probe(model, call, seed)
        # here a moved "control" is the finding itself: compare row by row
        moved = probe.compare(variant, reference, rows).table
        others = moved[1:].amax(dim=1)
        moved_rows = [i + 1 for i in torch.nonzero(others > RELATIVE_CHANGE).flatten().tolist()]
        if not moved_rows:
            return None

        def leaked(table: torch.Tensor) -> bool:
            return bool(table[1:].max() > RELATIVE_CHANGE)
        try:
            module, modules = probe.first_module(variant, reference, rows, leaked,
                                                 need_time=False)
        except Exception:
            module, modules = None, []
    return BatchLeak(0, moved_rows, n, module, modules[:8], float(others.max()))


__all__ = ["Call", "Probe", "CausalLeak", "BatchLeak", "causal_leak", "batch_leak",
           "primary_output", "perturbed", "RELATIVE_CHANGE", "MAX_VARIANTS"]
