"""A Linear layer with a hand-written backward that can be broken on purpose.

The gradient check needs bugs to catch: `BuggyLinear(n_in, n_out, bug=...)` computes the same
forward pass as `nn.Linear` but its backward (a custom `torch.autograd.Function`) can carry one
of the mistakes people make when they write backward passes by hand. No bug raises an error;
each one only makes some gradient silently wrong.
"""
from __future__ import annotations

import torch
from torch import nn

#: bug name -> what the backward pass gets wrong
BUGS: dict[str, str] = {
    "transposed_weight": "grad of the weight is transposed (square weight, so no shape error)",
    "sign_weight": "grad of the weight has the wrong sign",
    "factor2_weight": "grad of the weight is twice too large",
    "factor2_bias": "grad of the bias is twice too large (e.g. a mean taken as a sum of 2)",
    "one_element": "one element of the weight's grad is wrong (far from the first 5)",
    "sign_input": "grad passed to the previous layer has the wrong sign",
}


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, bug):  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.bug = bug
        return x @ weight.t() + bias

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        bug = ctx.bug
        grad_x = grad_out @ weight
        grad_w = grad_out.t() @ x
        grad_b = grad_out.sum(0)
        if bug == "transposed_weight":
            grad_w = grad_w.t()
        elif bug == "sign_weight":
            grad_w = -grad_w
        elif bug == "factor2_weight":
            grad_w = 2 * grad_w
        elif bug == "factor2_bias":
            grad_b = 2 * grad_b
        elif bug == "one_element":
            grad_w = grad_w.clone()
            flat = grad_w.view(-1)
            k = flat.numel() - 3  # near the end: the lesson's first-5 check never sees it
            flat[k] = flat[k] * -3.0 + 0.1
        elif bug == "sign_input":
            grad_x = -grad_x
        return grad_x, grad_w, grad_b, None


class BuggyLinear(nn.Module):
    """`nn.Linear` with a hand-written backward; `bug` (a key of `BUGS`) breaks it."""

    def __init__(self, n_in: int, n_out: int, bug: str | None = None):
        super().__init__()
        if bug is not None and bug not in BUGS:
            raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
        if bug == "transposed_weight" and n_in != n_out:
            raise ValueError("transposed_weight needs a square weight (n_in == n_out)")
        reference = nn.Linear(n_in, n_out)
        self.weight = nn.Parameter(reference.weight.detach().clone())
        self.bias = nn.Parameter(reference.bias.detach().clone())
        self.bug = bug

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _LinearFunction.apply(x, self.weight, self.bias, self.bug)
