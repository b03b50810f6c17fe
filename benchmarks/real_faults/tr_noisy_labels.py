"""A quarter of the labels flipped to a random class by a careless annotation pass."""
import torch
from torch import nn

from .harness import Fault, Script, Split, adam, digits, mlp


def build(bug: bool, seed: int) -> Script:
    d = digits(seed)
    y = d.y_train.clone()
    if bug:
        g = torch.Generator().manual_seed(seed)
        flip = torch.rand(len(y), generator=g) < 0.25
        y[flip] = (y[flip] + torch.randint(1, 10, (int(flip.sum()),), generator=g)) % 10
    model = mlp([64, 128, 10])
    return Script(model, Split(d.x_train, y, d.x_val, d.y_val), nn.CrossEntropyLoss(),
                  adam(model, 3e-3), steps=150)


FAULT = Fault("noisy labels", "Humbatova et al. taxonomy: wrong labels for training data; "
              "bhanML/Co-teaching#4", "training", ("LABEL_NOISE",),
              "the training loss stays high; a quarter of training labels disagree with the model",
              lambda r: r.losses[-1] > 0.5, build)
