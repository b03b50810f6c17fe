"""Optimizer built, then the classifier head replaced for the new task: the new head never trains."""
from torch import nn

from .harness import Fault, Script, adam, below_chance, digits, mlp


def build(bug: bool, seed: int) -> Script:
    model = mlp([64, 64, 64, 5])            # "pretrained" body with an old 5-class head
    if bug:
        opt = adam(model)
        model[4] = nn.Linear(64, 10)
    else:
        model[4] = nn.Linear(64, 10)
        opt = adam(model)
    return Script(model, digits(seed), nn.CrossEntropyLoss(), opt)


FAULT = Fault("optimizer created before the head was replaced", "pytorch/vision#132 (fine-tuning "
              "resnet18, fc replaced); ifzhang/FairMOT#125 (classifier not optimised)", "training",
              ("PARAMS_NOT_UPDATED",), "the new head's weights never change",
              lambda r: not r.moved["4.weight"], build, blame="4")
