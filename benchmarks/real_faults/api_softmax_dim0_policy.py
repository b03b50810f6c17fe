"""nn.Softmax(dim=0) at the end of a classifier trained on batches: classes normalised per batch."""
import torch
from torch import nn

from .harness import Fault, Script, blobs, mlp, sgd


def build(bug: bool, seed: int) -> Script:
    model = nn.Sequential(mlp([10, 32, 3]), nn.Softmax(dim=0 if bug else 1))
    loss = lambda p, y: nn.functional.nll_loss(torch.log(p + 1e-9), y)
    return Script(model, blobs(seed, classes=3), loss, sgd(model, 0.5))


FAULT = Fault("nn.Softmax(dim=0) on batched input", "DeepReinforcementLearning/"
              "DeepReinforcementLearningInAction#32; perone/euclidesdb#2", "API",
              ("SOFTMAX_WRONG_DIM", "BATCH_MIXING"), "a sample's probabilities depend on the "
              "rest of its batch and do not sum to 1", lambda r: not r.batch_consistent, build,
              blame="1")
