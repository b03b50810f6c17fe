"""The discriminator's optimizer.zero_grad() missing: its gradients pile up over the run."""
from torch import nn

from .harness import Fault, Script, blobs, mlp, sgd


def step_without_zero_grad(s, loss_fn, x, y):
    loss = loss_fn(s.model(x), y)
    loss.backward()
    s.optimizer.step()
    return loss


def build(bug: bool, seed: int) -> Script:
    model = mlp([10, 32, 2])
    s = Script(model, blobs(seed, spread=3.0), nn.CrossEntropyLoss(), sgd(model, 0.05, 0.9),
               steps=200)
    if bug:
        s.step = step_without_zero_grad
    return s


FAULT = Fault("zero_grad() missing", "Hsintien-Ng/idinvert_pytorch-reproduced#1", "training",
              ("MISSING_ZERO_GRAD",), "the loss oscillates instead of settling",
              lambda r: r.val_score < 0.75 or r.losses[-1] > 2 * min(r.losses), build)
