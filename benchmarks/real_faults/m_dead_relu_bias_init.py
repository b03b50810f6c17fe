"""A negative bias initialisation puts every ReLU unit below zero: the network outputs a constant."""
import torch
from torch import nn

from .harness import Fault, Script, adam, below_chance, digits, mlp


def build(bug: bool, seed: int) -> Script:
    model = mlp([64, 64, 64, 10])
    if bug:
        with torch.no_grad():
            model[0].bias.fill_(-6.0)
    return Script(model, digits(seed), nn.CrossEntropyLoss(), adam(model, 1e-3))


FAULT = Fault("ReLU layer dead from initialisation", "jvargasmu/population_estimation#68; "
              "keras-team/keras#7057; AUTOTRAINER (Zhang et al., ICSE 2021): dying ReLU", "model",
              ("DEAD_NEURONS",), "the model predicts the same class for everything",
              below_chance, build, blame="1")
