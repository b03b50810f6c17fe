"""The optimizer is built over a deep copy of the model (made to keep the 'best' weights)."""
import copy

from torch import nn

from .harness import Fault, Script, adam, below_chance, digits, mlp


def build(bug: bool, seed: int) -> Script:
    model = mlp([64, 64, 10])
    best = copy.deepcopy(model)
    opt = adam(best if bug else model)
    return Script(model, digits(seed), nn.CrossEntropyLoss(), opt)


FAULT = Fault("optimizer over a copy of the model", "pytorch/tutorials PR#188 (state_dict kept "
              "without a copy: the other side of the same confusion); Humbatova et al.: "
              "optimiser bound to the wrong parameters", "training", ("PARAMS_NOT_UPDATED",),
              "accuracy stays at chance", below_chance, build)
