"""Every weight initialised to zero: the hidden units stay identical and learn one feature."""
import torch
from torch import nn

from .harness import Fault, Script, sgd, xor


def build(bug: bool, seed: int) -> Script:
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    if bug:
        for p in model.parameters():
            torch.nn.init.zeros_(p)
    return Script(model, xor(seed, n_train=1024, features=8), nn.CrossEntropyLoss(), sgd(model, 0.5), steps=300)


FAULT = Fault("all weights initialised to zero", "wagonhelm/NaNmnist#2; yz93/LAVT-RIS#25", "model",
              ("SYMMETRIC_WEIGHTS",), "XOR stays at chance: the hidden layer acts as one unit",
              lambda r: r.val_score < 0.75, build, blame="0")
