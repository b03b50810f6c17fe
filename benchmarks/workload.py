"""The workload the overhead targets are stated on: a 512-1024-1024-10 MLP, batch 256, Adam,
two threads. Shared by the benchmarks that compare step times with and without the debugger."""
from __future__ import annotations

import time
from typing import Any, Callable

import torch
from torch import nn

BATCH, IN_FEATURES, CLASSES = 256, 512, 10


def make_model(seed: int) -> nn.Module:
    """The MLP, with the same initialisation for every configuration given the same seed."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN_FEATURES, 1024), nn.ReLU(), nn.Linear(1024, 1024),
                         nn.ReLU(), nn.Linear(1024, CLASSES))


def make_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """One fixed batch of inputs and class labels; also pins torch to two threads."""
    torch.set_num_threads(2)
    torch.manual_seed(seed)
    return torch.randn(BATCH, IN_FEATURES), torch.randint(0, CLASSES, (BATCH,))


def train_steps(model: nn.Module, opt: torch.optim.Optimizer, criterion: Callable[..., Any],
                x: torch.Tensor, y: torch.Tensor, debugger: Any = None, n: int = 1,
                clock: Callable[[], float] = time.perf_counter) -> float:
    """`n` plain training steps, the loss handed to `debugger.record_loss` if a debugger is
    given (as a user of the debugger would); the time they took by `clock`, in seconds."""
    start = clock()
    for _ in range(n):
        opt.zero_grad()
        loss = criterion(model(x), y)
        if debugger is not None:
            debugger.record_loss(loss.detach())
        loss.backward()
        opt.step()
    return clock() - start
