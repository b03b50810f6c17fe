"""ReLU after the last Linear of a regression net: negative targets are out of reach."""
from torch import nn

from .harness import Fault, Script, adam, regression


def build(bug: bool, seed: int) -> Script:
    layers = [nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 1)] + ([nn.ReLU()] if bug else [])
    model = nn.Sequential(*layers, nn.Flatten(0))
    return Script(model, regression(seed, n_train=1024), nn.MSELoss(), adam(model, 1e-2), steps=300,
                  task="regression")


FAULT = Fault("ReLU on the regression output", "ProteomicsML/ProteomicsML#203", "model",
              ("OUTPUT_RANGE_MISMATCH",), "predictions never go below 0; R^2 stays low",
              lambda r: r.val_score < 0.7, build, blame="3")
