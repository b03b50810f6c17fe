"""A vanilla RNN on long sequences without gradient clipping (fixed: clip_grad_norm_)."""
import torch
from torch import nn

from .harness import Fault, Script, sequences, sgd


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn, self.head = nn.RNN(4, 32, batch_first=True), nn.Linear(32, 2)
        with torch.no_grad():
            self.rnn.weight_hh_l0.copy_(torch.linalg.qr(torch.randn(32, 32))[0] * 1.6)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def make_step(bug: bool):
    def step(s, loss_fn, x, y):
        s.optimizer.zero_grad()
        loss = loss_fn(s.model(x), y)
        loss.backward()
        if not bug:
            torch.nn.utils.clip_grad_norm_(s.model.parameters(), 0.5)
        s.optimizer.step()
        return loss
    return step


def build(bug: bool, seed: int) -> Script:
    model = Net()
    s = Script(model, sequences(seed, steps=80), nn.CrossEntropyLoss(), sgd(model, 0.05, 0.9),
               steps=100)
    s.step = make_step(bug)
    return s


FAULT = Fault("RNN trained without gradient clipping", "pytorch/pytorch#309 (models fail to "
              "converge without clipping); AUTOTRAINER: exploding gradient", "training",
              ("EXPLODING_GRADIENT", "NAN_OR_INF", "LR_TOO_HIGH"),
              "the loss spikes and the accuracy collapses",
              lambda r: not r.finite or r.val_score < 0.75, build)
