"""(batch, seq, feature) fed to an LSTM built without batch_first=True: batch read as time."""
from torch import nn

from .harness import Fault, Script, adam, sequences


class Net(nn.Module):
    def __init__(self, bug: bool) -> None:
        super().__init__()
        self.bug, self.rnn, self.head = bug, nn.LSTM(4, 16, batch_first=not bug), nn.Linear(16, 2)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def build(bug: bool, seed: int) -> Script:
    model = Net(bug)
    return Script(model, sequences(seed, steps=20), nn.CrossEntropyLoss(), adam(model, 3e-3),
                  steps=100)


FAULT = Fault("LSTM without batch_first on batch-first data", "Cadene/vqa.pytorch#40; "
              "facebookresearch/fairseq#2449", "tensors and inputs", ("BATCH_MIXING",),
              "accuracy far below what the same net reaches", lambda r: not r.batch_consistent, build)
