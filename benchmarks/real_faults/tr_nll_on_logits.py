"""nn.NLLLoss fed raw logits: the loss runs to minus infinity instead of fitting."""
from torch import nn

from .harness import Fault, Script, adam, blobs, mlp


def build(bug: bool, seed: int) -> Script:
    model = mlp([10, 32, 3])
    if not bug:
        model.append(nn.LogSoftmax(dim=1))
    return Script(model, blobs(seed, classes=3), nn.NLLLoss(), adam(model, 1e-2), steps=150)


FAULT = Fault("NLLLoss on raw logits", "yanx27/Pointnet_Pointnet2_pytorch#30; pytorch/pytorch#12703",
              "API", ("NLL_WITHOUT_LOG_SOFTMAX",), "a negative label loss",
              lambda r: min(r.losses) < 0, build, blame="2")
