"""StepLR(step_size=epochs // 2, gamma=0.1) stepped every batch: the rate is ~0 after a few epochs."""
import torch
from torch import nn

from .harness import Fault, Script, digits, mlp, sgd


def build(bug: bool, seed: int) -> Script:
    model = mlp([64, 64, 10])
    opt = sgd(model, 0.05, 0.9)
    s = Script(model, digits(seed), nn.CrossEntropyLoss(), opt, steps=240,
               scheduler=torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.1))
    s.scheduler_per_batch = bug
    return s


FAULT = Fault("scheduler stepped every batch", "Lornatang/SRGAN-PyTorch#1; pytorch/vision#1261",
              "API", ("LR_DECAYED",), "the model stops training after a few steps",
              lambda r: r.script.optimizer.param_groups[0]["lr"] < 1e-8, build)
