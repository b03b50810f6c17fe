"""Token data for the sequence faults: a synthetic language whose entropy floor is known.

`Language` is a second-order Markov chain over the ids `low .. low + vocab - 1` (ids below
`low` stay free for padding and special tokens). The first two tokens of a text are uniform;
every later token is one of `choices` successors of the two before it, each equally likely.
So the entropy of the next token given everything before it is known exactly: ln(vocab) for
the second token, ln(choices) from the third on. `floor(targets)` turns that into the lowest
mean cross-entropy any model can reach on fresh text at given target positions. A validation
loss under it is not learning: the model reads the answer.

`Texts` are batches of such texts, padded to one length, with their lengths; the fault files
lay them out as their scripts would (targets shifted or not, padding counted or -100, an
attention mask of 1s on the text, ...).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from broken_models.datasets import rows_in

from .harness import Result, Split

VOCAB = 12
"""Text ids of the faults' languages: 1 .. VOCAB (0 stays free for padding)."""
PAD = 0


@dataclass(frozen=True)
class Language:
    """A second-order Markov language (see the module doc)."""

    successors: torch.Tensor      # (vocab, vocab, choices): the ids that may follow (a, b)
    low: int                      # the first text id

    @property
    def vocab(self) -> int:
        return self.successors.shape[0]

    @property
    def choices(self) -> int:
        return self.successors.shape[-1]

    def sample(self, n: int, length: int, g: torch.Generator) -> torch.Tensor:
        """`n` texts of `length` tokens, ids from `low` on: (n, length) long."""
        out = torch.empty(n, length, dtype=torch.long)
        out[:, :2] = torch.randint(0, self.vocab, (n, min(2, length)), generator=g)
        for t in range(2, length):
            pick = torch.randint(0, self.choices, (n,), generator=g)
            out[:, t] = self.successors[out[:, t - 2], out[:, t - 1], pick]
        return out + self.low

    def entropy(self, position: torch.Tensor) -> torch.Tensor:
        """Nats of the token at each text position (0-based), given the ones before it."""
        h = torch.full(position.shape, math.log(self.choices))
        h[position == 1] = math.log(self.vocab)
        h[position == 0] = math.log(self.vocab)      # nothing before it: never a target here
        return h

    def floor(self, positions: torch.Tensor) -> float:
        """The lowest mean loss over targets at these text positions (1 and up)."""
        return float(self.entropy(positions).mean())


def language(seed: int, vocab: int = VOCAB, choices: int = 2, low: int = 1) -> Language:
    """A language drawn from `seed`: each pair of tokens gets `choices` distinct successors."""
    g = torch.Generator().manual_seed(7919 + seed)
    succ = torch.stack([torch.randperm(vocab, generator=g)[:choices]
                        for _ in range(vocab * vocab)]).reshape(vocab, vocab, choices)
    return Language(succ, low)


@dataclass(frozen=True)
class Texts:
    """Texts of one language padded to one length: (n, length) ids, and each text's length."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    pad: int | None

    @property
    def real(self) -> torch.Tensor:
        """(n, length) True at the text, False at the padding (an attention mask's 1s)."""
        return torch.arange(self.tokens.shape[1])[None, :] < self.lengths[:, None]


def texts(lang: Language, n: int, length: int, g: torch.Generator,
          shortest: int | None = None, pad: int | None = None) -> Texts:
    """`n` texts of `length` tokens, or of random lengths from `shortest` up, right-padded
    with `pad` (the first text is always full: a batch is padded to its longest)."""
    tokens = lang.sample(n, length, g)
    lengths = torch.full((n,), length)
    if shortest is not None:
        lengths = torch.randint(shortest, length + 1, (n,), generator=g)
        lengths[0] = length
        tokens = torch.where(torch.arange(length)[None, :] < lengths[:, None], tokens,
                             pad if pad is not None else 0)
    return Texts(tokens, lengths, pad)


def train_val(seed: int, length: int, shortest: int | None = None, pad: int | None = None,
              n_train: int = 512, n_val: int = 256) -> tuple[Language, torch.Tensor, torch.Tensor]:
    """The language of `seed`, and training and validation texts (see `texts`) that share no
    row: a short text drawn twice would be a duplicate across the splits."""
    lang, g = language(seed), torch.Generator().manual_seed(seed)
    train = texts(lang, n_train, length, g, shortest, pad).tokens
    val = texts(lang, 2 * n_val, length, g, shortest, pad).tokens
    return lang, train, val[~rows_in(val, train)][:n_val]


def labelled(seed: int, length: int, shortest: int | None = None, pad: int | None = None,
             n_train: int = 512, n_val: int = 256) -> Split:
    """Texts to classify: label 1 when most of a text's tokens are from the lower half of the
    vocabulary (a count over every real token: a model must read the whole text)."""
    _, train, val = train_val(seed, length, shortest, pad, n_train, n_val)

    def label(tokens: torch.Tensor) -> torch.Tensor:
        real = tokens != (pad if pad is not None else -1)
        low = (tokens <= VOCAB // 2) & real
        return (2 * low.sum(1) > real.sum(1)).long()

    return Split(train, label(train), val, label(val))


def below_floor(r: Result, floor: float, margin: float = 0.15) -> bool:
    """Some recorded validation loss fell under the language's floor by more than `margin`
    nats: the model reads the tokens it is asked to predict."""
    return any(v < floor - margin for v in r.val_losses)


def next_token_split(seed: int, length: int, n_train: int = 512, n_val: int = 256
                     ) -> tuple[Split, float]:
    """Texts of `length` tokens laid out as nanoGPT does: inputs `text[:, :-1]`, targets
    `text[:, 1:]`; and the floor of the validation loss."""
    lang, train, val = train_val(seed, length, n_train=n_train, n_val=n_val)
    return (Split(train[:, :-1], train[:, 1:], val[:, :-1], val[:, 1:]),
            lang.floor(torch.arange(1, length)))


def flat_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(B, T, V) logits against (B, T) targets, flattened as nanoGPT's loss is."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


@dataclass
class CausalLMOutput:
    """What a Hugging Face causal LM returns: the loss when given labels, and the logits."""

    loss: torch.Tensor | None
    logits: torch.Tensor
