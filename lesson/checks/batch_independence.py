"""Does one sample's output depend on another sample's input? (Karpathy's dependency test.)

In a correct model the samples of a batch never meet: output i is a function of input i alone.
Reshaping with `view` where `permute` was needed, a softmax over the batch dimension, or an RNN
that reads the batch dimension as time all mix samples silently; the loss still falls.

The test: take the gradient of (the sum of) output i with respect to the whole input batch.
Only row i of that gradient may be non-zero; any other row j means output i saw input j.
The model runs in eval mode (batch norm in training mode mixes samples by design) and is put
back as it was afterwards.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lesson.findings import Finding
from lesson.restore import preserved, require_module

#: A leak smaller than this fraction of the sample's own gradient is round-off.
RELATIVE_LEAK = 1e-6


def _first_tensor(output: Any) -> torch.Tensor:
    """The model's output, or its first tensor when it returns a tuple, list or dict."""
    if isinstance(output, torch.Tensor):
        return output
    values = output.values() if isinstance(output, dict) else output
    for value in values:
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, (tuple, list, dict)):
            return _first_tensor(value)
    raise TypeError(f"the model's output holds no tensor (got {type(output).__name__})")


def check_batch_independence(model: nn.Module, x: torch.Tensor, *, batch_dim: int = 0,
                             output_batch_dim: int | None = None,
                             max_samples: int = 8) -> list[Finding]:
    """BATCH_MIXING findings (empty when every output depends on its own input only).

    `batch_dim`: the batch dimension of `x` (1 for a (time, batch, features) tensor);
    `output_batch_dim`: that of the output (default: the same). Up to `max_samples` samples
    are tested, one backward pass each; the evidence lists the offending (output, input) pairs.
    """
    require_module(model)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError("x must be floating point (the test differentiates with respect to "
                        "it); for token ids, test the model from its embedding output on")
    if x.dim() == 0 or not -x.dim() <= batch_dim < x.dim():
        raise ValueError(f"batch_dim={batch_dim} is not a dimension of x (shape "
                         f"{tuple(x.shape)})")
    n = x.shape[batch_dim]
    if n < 2:
        raise ValueError(f"need at least 2 samples along batch_dim={batch_dim} to test "
                         f"independence, got {n}")
    out_dim = batch_dim if output_batch_dim is None else output_batch_dim

    pairs: list[list[int]] = []
    worst = 0.0
    samples = list(range(min(n, max_samples)))
    with preserved(model):
        model.eval()
        inputs = x.detach().clone().requires_grad_(True)
        output = _first_tensor(model(inputs))
        if output.shape[out_dim] != n:
            raise ValueError(f"the output has {output.shape[out_dim]} entries along "
                             f"output_batch_dim={out_dim}, the input {n}: pass the right "
                             "batch_dim/output_batch_dim")
        leaks = []
        for i in samples:
            (grad,) = torch.autograd.grad(output.select(out_dim, i).sum(), inputs,
                                          retain_graph=True, allow_unused=True)
            if grad is None:
                grad = torch.zeros_like(inputs)
            per_sample = grad.movedim(batch_dim, 0).reshape(n, -1).abs().amax(dim=1)
            leaks.append(per_sample)
        table = torch.stack(leaks).cpu()  # rows: output sample, columns: input sample
    for i in samples:
        row = table[i]
        own = float(row[i])
        others = row.clone()
        others[i] = 0.0
        scale = max(own, float(row.max()), 1e-30)
        for j in torch.nonzero(others > RELATIVE_LEAK * scale).flatten().tolist():
            pairs.append([i, j])
            worst = max(worst, float(others[j]) / scale)
    if not pairs:
        return []
    shown = ", ".join(f"{i}<-{j}" for i, j in pairs[:6]) + (" ..." if len(pairs) > 6 else "")
    return [Finding(
        "BATCH_MIXING",
        f"outputs depend on other samples' inputs (output<-input: {shown}); samples are "
        "mixed across the batch dimension",
        evidence={"pairs": pairs, "samples_checked": len(samples), "batch_size": n,
                  "max_relative_leak": worst, "batch_dim": batch_dim,
                  "output_batch_dim": out_dim})]
