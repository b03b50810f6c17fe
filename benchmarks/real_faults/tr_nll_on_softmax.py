"""nn.NLLLoss fed softmax probabilities instead of log-probabilities: the loss goes negative."""
from torch import nn

from .harness import Fault, Script, adam, digits, mlp


def build(bug: bool, seed: int) -> Script:
    model = mlp([64, 64, 10])
    model.append(nn.Softmax(dim=1) if bug else nn.LogSoftmax(dim=1))
    return Script(model, digits(seed), nn.NLLLoss(), adam(model, 1e-3), steps=150)


FAULT = Fault("NLLLoss on softmax outputs", "AnubhavGupta3377/Text-Classification-Models-Pytorch#9; "
              "clvrai/ACGAN-PyTorch#4", "API", ("NLL_WITHOUT_LOG_SOFTMAX", "DOUBLE_SOFTMAX"),
              "the loss is negative", lambda r: min(r.losses) < 0, build)
