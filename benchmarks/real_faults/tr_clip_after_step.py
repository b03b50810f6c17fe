"""clip_grad_norm_ called after optimizer.step(): targets in raw units (~10) give gradients that
the configured clipping never tames, because it runs once the step is taken."""
import torch
from torch import nn

from .harness import Fault, Script, Split, mlp, regression, sgd


def make_step(bug: bool):
    def step(s, loss_fn, x, y):
        s.optimizer.zero_grad()
        loss = loss_fn(s.model(x), y)
        loss.backward()
        if not bug:
            torch.nn.utils.clip_grad_norm_(s.model.parameters(), 1.0)
        s.optimizer.step()
        if bug:
            torch.nn.utils.clip_grad_norm_(s.model.parameters(), 1.0)
        return loss
    return step


def build(bug: bool, seed: int) -> Script:
    d = regression(seed, n_train=1024)
    d = Split(d.x_train, 10 * d.y_train, d.x_val, 10 * d.y_val)
    model = nn.Sequential(mlp([4, 64, 64, 1]), nn.Flatten(0))
    s = Script(model, d, nn.MSELoss(), sgd(model, 0.03, 0.9), steps=200, task="regression")
    s.step = make_step(bug)
    return s


FAULT = Fault("gradient clipping after optimizer.step()", "VGraphRNN/VGRNN#4; awslabs/graphstorm#1366; "
              "jongwook/onsets-and-frames#24", "API",
              ("EXPLODING_GRADIENT", "NAN_OR_INF", "LR_TOO_HIGH"),
              "the loss blows up although clipping is configured, or training ends far from "
              "the fit the clipped run reaches (R^2 above 0.9 on seeds 0-5)",
              lambda r: not r.finite or max(r.losses) > 10 * r.losses[0] or r.val_score < 0.8,
              build)
