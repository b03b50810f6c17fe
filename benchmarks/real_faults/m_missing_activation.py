"""No non-linearity between the Linear layers: the stack is one linear map and cannot fit XOR."""
from torch import nn

from .harness import Fault, Script, adam, xor


def build(bug: bool, seed: int) -> Script:
    model = (nn.Sequential(nn.Linear(8, 32), nn.Linear(32, 32), nn.Linear(32, 2)) if bug else
             nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                           nn.Linear(32, 2)))
    return Script(model, xor(seed, n_train=1024, features=8), nn.CrossEntropyLoss(), adam(model, 1e-2), steps=200)


FAULT = Fault("missing activation between layers", "jcjohnson/pytorch-examples#30; Humbatova et "
              "al. taxonomy: missing activation function", "model", ("UNDERFITTING",),
              "XOR stays at chance", lambda r: r.val_score < 0.7, build)
