"""A GRU text classifier that reads its output at the last time step of right-padded batches:
a short text is summarised by the state after its padding.

keitakurita/practical-torchtext#5 ("Last timestep output in the text classifier wrong?"):
`hdn, _ = self.encoder(self.embedding(seq)); feature = hdn[-1, :, :]` "doesn't seem to return
the last timestep output for variable length sequences. E.g. If there are two sentences in my
batch, one of length 20 and another of length 10, then -1 would slice the correct output for
first sentence but not for second sentence." (The same in thtrieu/qclass_dl#1: with
`outputs[-1]` "I get terrible result ... my be the output of <PAD/> word".) The fix reads each
text's own last step (or packs the batch). Reproduced with the issue's time-first GRU.
"""
from __future__ import annotations

import torch
from torch import nn

from .harness import Fault, Result, Script, adam
from .language import PAD, VOCAB, labelled

LENGTH, SHORTEST = 24, 6


class SimpleBiLSTMBaseline(nn.Module):        # the name; a GRU here
    def __init__(self, bug: bool, d: int = 32) -> None:
        super().__init__()
        self.bug = bug
        self.embedding = nn.Embedding(VOCAB + 1, d, padding_idx=PAD)
        self.encoder = nn.GRU(d, d)                    # (time, batch, features)
        self.predictor = nn.Linear(d, 2)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        hdn, _ = self.encoder(self.embedding(seq.t()))
        if self.bug:
            feature = hdn[-1, :, :]
        else:
            last = (seq != PAD).sum(1) - 1
            feature = hdn[last, torch.arange(seq.shape[0])]
        return self.predictor(feature)


def build(bug: bool, seed: int) -> Script:
    model = SimpleBiLSTMBaseline(bug)
    # 2048 texts: with 512 the fixed GRU overfitted them on seeds 1, 4 and 5 (OVERFITTING)
    data = labelled(seed, LENGTH, SHORTEST, PAD, n_train=2048)
    return Script(model, data, nn.CrossEntropyLoss(), adam(model, 1e-2), steps=150, batch=32)


def padding_moves_outputs(r: Result) -> bool:
    """The same texts, given 6 more positions of padding (a batch with a longer text), get
    other outputs."""
    model, x = r.script.model, r.script.data.x_val[:64]
    longer = torch.cat([x, torch.full((len(x), 6), PAD)], 1)
    model.eval()
    with torch.no_grad():
        moved = (model(x) - model(longer)).abs().max()
    model.train()
    return float(moved) > 1e-4


FAULT = Fault("classifier reads the last time step of right-padded texts",
              "keitakurita/practical-torchtext#5; thtrieu/qclass_dl#1", "sequence",
              ("PADDED_POSITION_READ",),
              "a text's prediction depends on how much padding its batch gives it",
              padding_moves_outputs, build)
