"""A tiny neural-network framework in NumPy, for exercise 5 ("break the backward pass").

Each layer has a `forward` that remembers what its backward pass will need, and a `backward`
that takes the gradient of the loss with respect to the layer's output and returns the
gradient with respect to its input, filling in the gradients of its own parameters on the way.
That is all of backpropagation:

    model = Sequential(Linear(4, 8), ReLU(), Linear(8, 8, bug="transposed_weight"), ReLU(),
                       Linear(8, 3))
    loss_fn = SoftmaxCrossEntropy()
    loss = loss_fn.forward(model.forward(x), y)
    model.zero_grad()
    model.backward(loss_fn.backward())
    SGD(model.parameters(), lr=0.1).step()

`gradient_check(model, loss_fn, x, y)` compares every parameter's gradient with finite
differences (the same maths as the torch check in `lesson.checks.gradcheck`) and names the tensor
whose backward is wrong. Everything is float64.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from lesson.checks.gradcheck import GradientCheckReport, findings_for, numerical_gradient_check

BUGS = {"transposed_weight": "the weight's gradient is transposed (needs a square weight)"}


class Parameter:
    """A trainable array and the gradient of the loss with respect to it."""

    def __init__(self, data: np.ndarray):
        self.data = np.asarray(data, dtype=np.float64)
        self.grad = np.zeros_like(self.data)


class Module:
    """Base class: forward, backward, and the parameters to train."""

    def forward(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def backward(self, grad_out: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        for name, value in vars(self).items():
            if isinstance(value, Parameter):
                yield prefix + name, value

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad[...] = 0.0

    def pieces(self) -> list[np.ndarray]:
        """Which linear piece the last forward pass ran on (ReLU masks); see gradcheck."""
        return []


class Linear(Module):
    """y = x @ W.T + b, with W of shape (n_out, n_in) as in torch."""

    def __init__(self, n_in: int, n_out: int, bug: str | None = None,
                 rng: np.random.Generator | None = None):
        if bug is not None and bug not in BUGS:
            raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
        if bug == "transposed_weight" and n_in != n_out:
            raise ValueError("transposed_weight needs a square weight (n_in == n_out), "
                             "otherwise the shapes give the bug away")
        rng = rng or np.random.default_rng()
        bound = 1.0 / np.sqrt(n_in)
        self.weight = Parameter(rng.uniform(-bound, bound, (n_out, n_in)))
        self.bias = Parameter(rng.uniform(-bound, bound, n_out))
        self.bug = bug

    def forward(self, x: np.ndarray) -> np.ndarray:
        self.x = x
        return x @ self.weight.data.T + self.bias.data

    def backward(self, grad_out: np.ndarray) -> np.ndarray:
        grad_w = grad_out.T @ self.x          # (n_out, n_in), like the weight
        if self.bug == "transposed_weight":
            grad_w = grad_w.T                 # the bug: same shape, wrong entries
        self.weight.grad += grad_w
        self.bias.grad += grad_out.sum(axis=0)
        return grad_out @ self.weight.data


class ReLU(Module):
    def forward(self, x: np.ndarray) -> np.ndarray:
        self.on = x > 0
        return np.where(self.on, x, 0.0)

    def backward(self, grad_out: np.ndarray) -> np.ndarray:
        return grad_out * self.on

    def pieces(self) -> list[np.ndarray]:
        return [self.on.ravel()]


class Sequential(Module):
    def __init__(self, *layers: Module):
        self.layers = list(layers)

    def forward(self, x: np.ndarray) -> np.ndarray:
        for layer in self.layers:
            x = layer.forward(x)
        return x

    def backward(self, grad_out: np.ndarray) -> np.ndarray:
        for layer in reversed(self.layers):
            grad_out = layer.backward(grad_out)
        return grad_out

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        for i, layer in enumerate(self.layers):
            yield from layer.named_parameters(f"{prefix}{i}.")

    def pieces(self) -> list[np.ndarray]:
        return [m for layer in self.layers for m in layer.pieces()]


class SoftmaxCrossEntropy:
    """Mean cross-entropy of integer labels under softmax(logits); the log-sum-exp is shifted
    by the row maximum so large logits do not overflow."""

    def forward(self, logits: np.ndarray, labels: np.ndarray) -> float:
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        self.probs, self.labels = np.exp(log_probs), labels
        return float(-log_probs[np.arange(len(labels)), labels].mean())

    def backward(self) -> np.ndarray:
        grad = self.probs.copy()
        grad[np.arange(len(self.labels)), self.labels] -= 1.0
        return grad / len(self.labels)


class SGD:
    def __init__(self, params: list[Parameter], lr: float = 0.1):
        self.params, self.lr = params, lr

    def step(self) -> None:
        for p in self.params:
            p.data -= self.lr * p.grad


def gradient_check(model: Module, loss_fn: SoftmaxCrossEntropy, x: np.ndarray,
                   labels: np.ndarray, eps: float = 1e-4, seed: int = 0) -> GradientCheckReport:
    """Check every element of every parameter against finite differences; name the faulty
    tensor. Parameters are put back exactly; gradients are left as backward computed them."""
    loss_fn.forward(model.forward(x), labels)
    piece0 = np.concatenate(model.pieces() or [np.zeros(0, dtype=bool)])
    model.zero_grad()
    model.backward(loss_fn.backward())
    named = list(model.named_parameters())
    calls = 1

    def f() -> tuple[float, np.ndarray]:
        nonlocal calls
        calls += 1
        loss = loss_fn.forward(model.forward(x), labels)
        return loss, np.concatenate(model.pieces() or [np.zeros(0, dtype=bool)])

    checks = numerical_gradient_check(f, [p.data for _, p in named],
                                      [p.grad.copy() for _, p in named],
                                      [n for n, _ in named], eps=eps, seed=seed, piece0=piece0)
    return GradientCheckReport(checks, calls, findings=findings_for(checks))
