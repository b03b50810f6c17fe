"""loss = torch.tensor(loss.item(), requires_grad=True): backward reaches no parameter."""
import torch
from torch import nn

from .harness import Fault, Script, adam, below_chance, digits, mlp


def step_rewrapped(s, loss_fn, x, y):
    s.optimizer.zero_grad()
    loss = torch.tensor(loss_fn(s.model(x), y).item(), requires_grad=True)
    loss.backward()
    s.optimizer.step()
    return loss


def build(bug: bool, seed: int) -> Script:
    model = mlp([64, 64, 10])
    s = Script(model, digits(seed), nn.CrossEntropyLoss(), adam(model))
    if bug:
        s.step = step_rewrapped
    return s


FAULT = Fault("loss rebuilt from .item() with requires_grad=True", "Humbatova et al. taxonomy: "
              "API misuse (tensor re-created, graph lost); DeepDiagnosis benchmark", "API",
              ("NO_GRADIENT",), "accuracy stays at chance", below_chance, build, blame="0")
