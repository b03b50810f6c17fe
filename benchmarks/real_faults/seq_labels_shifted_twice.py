"""Labels shifted by the data pipeline and again by the model: it learns to predict the token
after next.

huggingface/transformers PR #562: the RocStories fine-tuning example built
`lm_labels[i, :len(with_cont) - 1] = with_cont[1:]` while `OpenAIGPTLMHeadModel` shifts its
labels itself, so the model was trained on the token two steps ahead; the fix removes the
script's shift. The same trap, "users who pre-shift their labels and end up training
next-next-token prediction by accident", led to transformers#32944 and PR #44642. Reproduced
with an LSTM language model whose `forward(input_ids, labels)` shifts as the Hugging Face heads
do, and a collate step that shifts too (the freed last label is -100).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .harness import Fault, Result, Script, Split
from .language import VOCAB, flat_cross_entropy, language, train_val

LENGTH = 24


class LSTMLanguageModel(nn.Module):
    def __init__(self, d: int = 48) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB + 1, d)
        self.lstm = nn.LSTM(d, d, num_layers=2, batch_first=True)
        self.lm_head = nn.Linear(d, VOCAB + 1)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None):
        logits = self.lm_head(self.lstm(self.embed(input_ids))[0])
        if labels is None:
            return logits
        shift_logits, shift_labels = logits[:, :-1], labels[:, 1:]     # tokens < n predict n
        return F.cross_entropy(shift_logits.reshape(-1, shift_logits.shape[-1]),
                               shift_labels.reshape(-1))


def labels_for(tokens: torch.Tensor, bug: bool) -> torch.Tensor:
    """What the script's collate step hands the model as labels."""
    if not bug:
        return tokens.clone()
    labels = torch.full_like(tokens, -100)
    labels[:, :-1] = tokens[:, 1:]        # shifted here, and again in the model
    return labels


def step(s: Script, loss_fn, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s.optimizer.zero_grad()
    loss = s.model(x, labels=y)
    loss.backward()
    s.optimizer.step()
    return loss


def evaluate(s: Script, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s.model.eval()
    with torch.no_grad():
        loss = s.model(x, labels=y)
    s.model.train()
    return loss


def build(bug: bool, seed: int) -> Script:
    _, train, val = train_val(seed, LENGTH)
    model = LSTMLanguageModel()
    return Script(model, Split(train, labels_for(train, bug), val, labels_for(val, bug)),
                  flat_cross_entropy, torch.optim.Adam(model.parameters(), lr=1e-2), steps=200,
                  batch=32, step=step, evaluate=evaluate, eval_every=40)


FLOOR = language(0).floor(torch.arange(1, LENGTH))


def next_token_loss(r: Result) -> float:
    """The trained model's loss at predicting each validation token from the ones before it."""
    model, x = r.script.model, r.script.data.x_val
    model.eval()
    with torch.no_grad():
        loss = flat_cross_entropy(model(x)[:, :-1], x[:, 1:])
    model.train()
    return float(loss)


FAULT = Fault("labels shifted by the collate step and again by the model",
              "huggingface/transformers PR #562; transformers#32944 (PR #44642)", "sequence",
              ("TARGETS_NOT_SHIFTED",),
              "the model predicts the token after next: next-token loss far above what it reaches",
              lambda r: next_token_loss(r) > FLOOR + 1.0, build)
