"""model.eval() for validation and no model.train() afterwards: dropout off for the rest of the run."""
import torch
from torch import nn

from .harness import Fault, Script, adam, digits


def evaluate_and_stay(s, x, y):
    s.model.eval()
    with torch.no_grad():
        return s.loss(s.model(x), y)


def build(bug: bool, seed: int) -> Script:
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, 10))
    s = Script(model, digits(seed, n_train=300), nn.CrossEntropyLoss(), adam(model),
               eval_every=5, steps=150)
    if bug:
        s.evaluate = evaluate_and_stay
    return s


FAULT = Fault("model.train() not restored after validation", "joeynmt/joeynmt#184; "
              "wkentaro/pytorch-fcn#56; pytorch/tutorials#1624", "training",
              ("EVAL_MODE_DURING_TRAINING",), "dropout is off during training after the first "
              "validation", lambda r: r.train_mode_share < 0.5, build)
