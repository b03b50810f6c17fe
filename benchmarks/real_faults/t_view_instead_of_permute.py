"""(batch, time, features) reshaped to (time, batch, features) with view instead of permute."""
from torch import nn

from .harness import Fault, Script, adam, sequences


class Net(nn.Module):
    def __init__(self, bug: bool) -> None:
        super().__init__()
        self.bug, self.rnn, self.head = bug, nn.GRU(4, 16), nn.Linear(16, 2)

    def forward(self, x):
        b, t, f = x.shape
        seq = x.view(t, b, f) if self.bug else x.permute(1, 0, 2)
        out, _ = self.rnn(seq)
        return self.head(out[-1])


def build(bug: bool, seed: int) -> Script:
    model = Net(bug)
    return Script(model, sequences(seed, steps=20), nn.CrossEntropyLoss(), adam(model, 1e-2),
                  steps=100)


FAULT = Fault("view used to swap batch and time", "zhouhaoyi/Informer2020#59", "tensors and inputs",
              ("BATCH_MIXING",), "an example's prediction changes with its batch-mates",
              lambda r: not r.batch_consistent, build)
