"""Weights drawn from N(0, 1) in a deep wide ReLU MLP: activations grow ~x10 per layer."""
import torch
from torch import nn

from .harness import Fault, Script, digits, mlp, sgd


def build(bug: bool, seed: int) -> Script:
    model = mlp([64, 256, 256, 256, 256, 10])
    if bug:
        with torch.no_grad():
            for m in model:
                if isinstance(m, nn.Linear):
                    m.weight.normal_(0.0, 1.0)
    return Script(model, digits(seed), nn.CrossEntropyLoss(), sgd(model, 0.05, 0.9), steps=100)


FAULT = Fault("N(0,1) initialisation of a deep ReLU net", "d2l-ai/d2l-vi#1127 (numerical "
              "stability and initialisation); AUTOTRAINER: exploding gradient", "model",
              ("EXPLODING_ACTIVATIONS", "EXPLODING_GRADIENT", "NAN_OR_INF", "LR_TOO_HIGH"),
              "the loss is huge or NaN from the first steps",
              lambda r: not r.finite or r.losses[0] > 100 or r.val_score < 0.8, build)
