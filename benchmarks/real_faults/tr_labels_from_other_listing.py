"""Labels read from a CSV sorted by file name while the images came from os.listdir() order."""
import torch
from torch import nn

from .harness import Fault, Script, Split, adam, below_chance, digits, mlp


def build(bug: bool, seed: int) -> Script:
    d = digits(seed, n_train=1000)
    names = [f"img_{i}.png" for i in range(len(d.x_train))]
    listing = sorted(range(len(names)), key=lambda i: hash((seed, names[i])))   # directory order
    by_name = sorted(range(len(names)), key=lambda i: names[i])                 # CSV order
    x = d.x_train[listing]
    y = d.y_train[by_name] if bug else d.y_train[listing]
    model = mlp([64, 128, 10])
    return Script(model, Split(x, y, d.x_val, d.y_val), nn.CrossEntropyLoss(), adam(model, 3e-3),
                  steps=200)


FAULT = Fault("labels listed in another order than the inputs", "skorch-dev/skorch#499 "
              "(predictions in another order than the labels); Humbatova et al.: wrong labels",
              "training", ("LABELS_SHUFFLED",), "validation accuracy at chance",
              below_chance, build)
