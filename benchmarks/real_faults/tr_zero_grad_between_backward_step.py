"""optimizer.zero_grad() placed between loss.backward() and optimizer.step(): nothing trains."""
from torch import nn

from .harness import Fault, Script, adam, below_chance, digits, mlp


def step_zero_after_backward(s, loss_fn, x, y):
    loss = loss_fn(s.model(x), y)
    loss.backward()
    s.optimizer.zero_grad()
    s.optimizer.step()
    return loss


def build(bug: bool, seed: int) -> Script:
    model = mlp([64, 64, 10])
    s = Script(model, digits(seed), nn.CrossEntropyLoss(), adam(model))
    if bug:
        s.step = step_zero_after_backward
    return s


FAULT = Fault("zero_grad() between backward() and step()", "SharifiZarchi/Introduction_to_Machine_"
              "Learning#55 (misplaced zero_grad); velog @rhss10 on zero_grad placement", "training",
              ("PARAMS_NOT_UPDATED",), "accuracy stays at chance: no weight ever changes",
              below_chance, build)
