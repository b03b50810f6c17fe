"""clip_grad_norm_ called after optimizer.step(): the long-sequence RNN's updates are never clipped."""
import torch
from torch import nn

from .harness import Fault, Script, sequences, sgd


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn, self.head = nn.RNN(4, 32, nonlinearity="relu", batch_first=True), nn.Linear(32, 2)
        with torch.no_grad():
            self.rnn.weight_hh_l0.copy_(1.05 * torch.eye(32) + 0.05 * torch.randn(32, 32))

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


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
    model = Net()
    s = Script(model, sequences(seed, steps=60), nn.CrossEntropyLoss(), sgd(model, 0.01), steps=100)
    s.step = make_step(bug)
    return s


FAULT = Fault("gradient clipping after optimizer.step()", "VGraphRNN/VGRNN#4; awslabs/graphstorm#1366",
              "API", ("EXPLODING_GRADIENT", "NAN_OR_INF", "LR_TOO_HIGH"),
              "the loss blows up although clipping is configured",
              lambda r: not r.finite or max(r.losses) > 10 * r.losses[0] or r.val_score < 0.7,
              build)
