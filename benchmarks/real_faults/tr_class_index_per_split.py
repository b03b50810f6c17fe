"""A class-to-index map built separately per split ("10" sorted before "2" in one of them)."""
import torch
from torch import nn

from .harness import Fault, Script, Split, adam, digits, mlp


def build(bug: bool, seed: int) -> Script:
    d = digits(seed)
    names = [str(c + 1) for c in range(10)]                  # folder names "1".."10"
    train_map = {n: i for i, n in enumerate(names)}          # numeric order
    val_map = {n: i for i, n in enumerate(sorted(names))} if bug else train_map   # "1","10","2"...
    y_val = torch.tensor([val_map[names[int(c)]] for c in d.y_val])
    model = mlp([64, 128, 10])
    return Script(model, Split(d.x_train, d.y_train, d.x_val, y_val), nn.CrossEntropyLoss(),
                  adam(model, 3e-3), steps=200)


FAULT = Fault("class indices differ between splits", "ultralytics/ultralytics#13936; "
              "pytorch/pytorch#22566", "training", ("LABELS_SHUFFLED",),
              "train accuracy high, validation accuracy near zero",
              lambda r: r.val_score < 0.5 < r.train_score, build)
