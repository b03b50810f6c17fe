"""(N, 1) predictions against (N,) targets in MSELoss: broadcast to (N, N), fits the mean."""
from torch import nn

from .harness import Fault, Script, adam, regression


def build(bug: bool, seed: int) -> Script:
    tail = [] if bug else [nn.Flatten(0)]
    model = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 1), *tail)
    return Script(model, regression(seed), nn.MSELoss(), adam(model, 3e-3), steps=200,
                  task="regression")


FAULT = Fault("MSELoss on (N,1) against (N,)", "pytorch/pytorch#16045 (warning added in PR#18349)",
              "tensors and inputs", ("LOSS_SHAPE_MISMATCH",), "the model predicts the mean; R^2 ~0",
              lambda r: r.val_score < 0.3, build)
