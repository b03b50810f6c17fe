"""The discriminator's optimizer.zero_grad() missing: its gradients pile up over the run."""
from torch import nn

from .harness import Fault, Script, digits, mlp, sgd


def step_without_zero_grad(s, loss_fn, x, y):
    loss = loss_fn(s.model(x), y)
    loss.backward()
    s.optimizer.step()
    return loss


def build(bug: bool, seed: int) -> Script:
    model = mlp([64, 64, 10])
    s = Script(model, digits(seed), nn.CrossEntropyLoss(), sgd(model, 0.05, 0.9), steps=150)
    if bug:
        s.step = step_without_zero_grad
    return s


FAULT = Fault("zero_grad() missing", "Hsintien-Ng/idinvert_pytorch-reproduced#1", "training",
              ("MISSING_ZERO_GRAD",), "the loss climbs by orders of magnitude instead of settling",
              lambda r: not r.finite or max(r.losses) > 10 * r.losses[0], build)
