"""`nn.TransformerEncoderLayer` built without `batch_first=True` and fed (batch, time,
features): attention runs across the batch, and each text is classified from its batch-mates.

Exorust/TorchLeet#5 ("In h3, we should pass batch_first=True to TransformerEncoderLayer"):
"Torch by default uses batch_first=False for the TransformerEncoderLayer, resulting in high
training loss and test error"; the maintainer: "Totally valid." (IBM/TabFormer PR #14 fixed the
same mistake by transposing.) Reproduced with the exercise's shape of model: embeddings,
positional embeddings, an encoder, a mean over the sequence, a linear classifier.
"""
from __future__ import annotations

import torch
from torch import nn

from .harness import Fault, Script, adam
from .language import VOCAB, labelled

LENGTH = 16


class TransformerClassifier(nn.Module):
    def __init__(self, bug: bool, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.embedding, self.pos = nn.Embedding(VOCAB + 1, d), nn.Embedding(LENGTH, d)
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=not bug)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.fc = nn.Linear(d, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embedding(x) + self.pos(torch.arange(x.shape[1])))
        return self.fc(h.mean(dim=1))


def build(bug: bool, seed: int) -> Script:
    model = TransformerClassifier(bug)
    # 2048 texts: with 512 the fixed encoder learnt them by heart on seed 11 (OVERFITTING)
    data = labelled(seed, LENGTH, n_train=2048)
    return Script(model, data, nn.CrossEntropyLoss(), adam(model, 3e-3),
                  steps=150, batch=32)


FAULT = Fault("TransformerEncoderLayer without batch_first on (batch, time, features)",
              "Exorust/TorchLeet#5; IBM/TabFormer PR #14", "sequence", ("BATCH_MIXING",),
              "high training loss and test error: a text's prediction depends on its batch",
              lambda r: not r.batch_consistent, build)
