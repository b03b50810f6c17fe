"""F.softmax on the model's output, then nn.CrossEntropyLoss: softmax applied twice."""
from torch import nn

from .harness import Fault, Script, adam, digits, mlp


def build(bug: bool, seed: int) -> Script:
    model = mlp([64, 64, 10])
    if bug:
        model.append(nn.Softmax(dim=1))
    return Script(model, digits(seed), nn.CrossEntropyLoss(), adam(model, 1e-3), steps=150)


FAULT = Fault("softmax before CrossEntropyLoss", "jindongwang/Deep-learning-activity-recognition#10; "
              "bowang-lab/Transformer-GCN-QA#32", "training", ("DOUBLE_SOFTMAX",),
              "the loss cannot fall below ~1.5 and learns slowly",
              lambda r: min(r.losses) > 1.4, build, blame="3")
