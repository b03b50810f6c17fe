"""Validation run without model.eval(): dropout and batch norm behave as in training."""
import torch
from torch import nn

from .harness import Fault, Script, adam, digits


def evaluate_in_train_mode(s, x, y):
    with torch.no_grad():
        return s.loss(s.model(x), y)


def build(bug: bool, seed: int) -> Script:
    model = nn.Sequential(nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.5),
                          nn.Linear(128, 10))
    s = Script(model, digits(seed), nn.CrossEntropyLoss(), adam(model))
    if bug:
        s.evaluate = evaluate_in_train_mode
    return s


FAULT = Fault("model.eval() forgotten at validation", "udacity/deep-learning-v2-pytorch#3; "
              "wolny/pytorch-3dunet#53", "training", ("TRAIN_MODE_DURING_EVAL",),
              "the validation loss of one model differs between two evaluations",
              lambda r: not r.script_eval_repeatable, build)
