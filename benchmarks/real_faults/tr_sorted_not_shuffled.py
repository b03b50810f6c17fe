"""Training rows sorted by class and the loader built with shuffle=False."""
from torch import nn

from .harness import Fault, Script, Split, digits, mlp, sgd


def build(bug: bool, seed: int) -> Script:
    d = digits(seed)
    order = d.y_train.argsort(stable=True)
    model = mlp([64, 64, 10])
    return Script(model, Split(d.x_train[order], d.y_train[order], d.x_val, d.y_val),
                  nn.CrossEntropyLoss(), sgd(model, 0.1), steps=150, batch=32, shuffle=not bug)


FAULT = Fault("sorted data, loader not shuffled", "NVIDIA/DIGITS#29 (unshuffled two-class data); "
              "Project-MONAI/tutorials#122", "training", ("UNSHUFFLED_BATCHES",),
              "the loss jumps up at every change of class (a saw-tooth curve)",
              lambda r: max(r.losses[-31:]) > 8 * min(r.losses), build)
