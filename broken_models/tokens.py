"""Token data for the sequence models of the catalogue: made in code, or shipped in the
repository, nothing downloaded.

`markov_source(seed)` is a synthetic language: a first-order Markov chain over a small
vocabulary whose sequences start from the chain's stationary distribution, so the entropy of
the next token given everything before it is the same at every position and known exactly,
`source.floor` nats. No model can bring the mean cross-entropy of fresh text below it: a
training loss under the floor is not learning, it is reading the answer.
`source.oracle_loss(tokens)` is the loss the true chain itself gets on given tokens (the
floor measured on exactly those tokens, without sampling noise).

`reviews(seed)` is a classification set of token sequences of varied lengths, padded: half of
the vocabulary are "positive" words, half "negative", and a sequence's label is whether most
of its words are positive (a count over the whole sequence: the model has to look at every
real token).

`corpus()` is a few kilobytes of public-domain English (`corpus.txt` names the sources) for
the character-level models.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from broken_models.datasets import Split

CORPUS = Path(__file__).with_name("corpus.txt")


@dataclass(frozen=True)
class MarkovSource:
    """A first-order Markov chain: `transitions[i, j]` = P(next = j | current = i)."""

    transitions: torch.Tensor     # (V, V), rows sum to 1
    start: torch.Tensor           # (V,), the stationary distribution
    floor: float                  # nats per predicted token, the lowest loss there is

    @property
    def vocab(self) -> int:
        return self.transitions.shape[0]

    def sample(self, n: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """`n` sequences of `length` tokens (long, shape (n, length))."""
        out = torch.empty(n, length, dtype=torch.long)
        out[:, 0] = torch.multinomial(self.start.expand(n, -1), 1, generator=generator)[:, 0]
        for t in range(1, length):
            out[:, t] = torch.multinomial(self.transitions[out[:, t - 1]], 1,
                                          generator=generator)[:, 0]
        return out

    def oracle_loss(self, tokens: torch.Tensor, keep: torch.Tensor | None = None) -> float:
        """Mean -ln P(token t | token t-1) over t >= 1 of `tokens` (n, length): what the
        chain itself scores on them. `keep` (n, length - 1), optional: which predicted
        positions count (the real tokens of a padded batch)."""
        if keep is None:
            return -self.transitions[tokens[:, :-1], tokens[:, 1:]].log().mean().item()
        keep = keep.bool()
        real = tokens.clamp(max=self.vocab - 1)      # padding ids are outside the vocabulary
        logp = self.transitions[real[:, :-1], real[:, 1:]].log()
        return -torch.where(keep, logp, 0.0).sum().item() / keep.sum().item()

    def impossible(self, tokens: torch.Tensor) -> float:
        """Share of the transitions in `tokens` (n, length) that the chain never makes (a
        token outside the vocabulary, padding say, counts as one)."""
        outside = tokens >= self.vocab
        real = tokens.clamp(max=self.vocab - 1)
        never = (self.transitions[real[:, :-1], real[:, 1:]] == 0) | outside[:, 1:] | outside[:, :-1]
        return never.float().mean().item()


MIN_FLOOR_SHARE = 0.75
"""A chain's floor is at least this share of the floor its Dirichlet gives on average: a few
seeds in a thousand draw a chain of nearly fixed transitions, whose text is so predictable that
a case's symptom measured against the floor (padding's free tokens, a look-ahead's gain) shrinks
below what the case promises. Such a draw is rejected and the chain drawn again."""


def markov_source(seed: int, vocab: int = 16, successors: int = 4,
                  concentration: float = 1.0) -> MarkovSource:
    """A random chain: each token has `successors` possible next tokens, with probabilities
    drawn from a Dirichlet(`concentration`), redrawn while the floor is under MIN_FLOOR_SHARE of
    its expected value. The floor is computed exactly: sum_i start_i * H(transitions[i]), start
    being the stationary distribution."""
    rng = np.random.default_rng(seed)
    # E[H] of a Dirichlet(a, ..., a) draw over k outcomes is digamma(k a + 1) - digamma(a + 1)
    expected = float(_digamma(successors * concentration + 1) - _digamma(concentration + 1))
    while True:
        source = _draw_chain(rng, vocab, successors, concentration)
        if source.floor >= MIN_FLOOR_SHARE * expected:
            return source


def _draw_chain(rng: np.random.Generator, vocab: int, successors: int,
                concentration: float) -> MarkovSource:
    transitions = np.zeros((vocab, vocab))
    for i in range(vocab):
        nxt = rng.choice(vocab, size=successors, replace=False)
        transitions[i, nxt] = rng.dirichlet(np.full(successors, concentration))
    # the stationary distribution: the left eigenvector of eigenvalue 1, found by iterating
    # from the uniform distribution mixed with a little of it (a periodic chain converges too)
    lazy = 0.5 * transitions + 0.5 * np.eye(vocab)
    start = np.full(vocab, 1.0 / vocab)
    for _ in range(10_000):
        nxt_start = start @ lazy
        if np.abs(nxt_start - start).max() < 1e-13:
            break
        start = nxt_start
    start /= start.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(transitions > 0, transitions * np.log(transitions), 0.0).sum(1)
    return MarkovSource(torch.tensor(transitions, dtype=torch.float32),
                        torch.tensor(start, dtype=torch.float32),
                        float(start @ entropy))


def _digamma(x: float) -> float:
    return float(torch.special.digamma(torch.tensor(x, dtype=torch.float64)))


def reviews(seed: int, n_train: int = 4096, n_val: int = 2048, vocab: int = 24,
            lengths: tuple[int, int] = (5, 21), width: int = 24) -> Split:
    """Token sequences (long, (n, width)) right-padded with the id `vocab`, labelled 1 when
    more of their words come from the first half of the vocabulary than from the second. The
    real lengths are odd, drawn uniformly from `lengths` (both ends included): no tie, and the
    label says nothing about the length."""
    g = torch.Generator().manual_seed(seed)
    odd = torch.arange(lengths[0] | 1, lengths[1] + 1, 2)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, vocab, (n, width), generator=g)
        length = odd[torch.randint(0, len(odd), (n,), generator=g)]
        real = torch.arange(width)[None, :] < length[:, None]
        positive = ((tokens < vocab // 2) & real).sum(1)
        return tokens.masked_fill(~real, vocab), (2 * positive > length).long()

    return Split(*draw(n_train), *draw(n_val))


@torch.no_grad()
def next_token_loss(model: nn.Module, tokens: torch.Tensor, pad: int | None = None) -> float:
    """Held-out cross-entropy of a language model: logits for tokens[:, :-1] against
    tokens[:, 1:], the targets equal to `pad` left out."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1),
                           ignore_index=-100 if pad is None else pad).item()


@torch.no_grad()
def greedy(model: nn.Module, prompts: torch.Tensor, steps: int) -> torch.Tensor:
    """`prompts` (n, length) followed by `steps` tokens, each the model's most likely next."""
    out = prompts
    for _ in range(steps):
        out = torch.cat([out, model(out)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return out


def answers_compared(logits: torch.Tensor, other: torch.Tensor) -> dict[str, float]:
    """Two sets of logits for the same inputs presented two ways (padded longer, scored in
    another batch), which a correct model answers alike: the share of rows whose class
    changed, and the mean total-variation distance between the two predicted distributions
    (0 for a model that does not care, up to float round-off)."""
    moved = 0.5 * (logits.softmax(-1) - other.softmax(-1)).abs().sum(-1)
    return {"changed": (logits.argmax(-1) != other.argmax(-1)).float().mean().item(),
            "moved": moved.mean().item()}


def lm_scores(model: nn.Module, source: MarkovSource, val: torch.Tensor, losses: list[float],
              pad: int | None = None) -> dict[str, object]:
    """What a user reads after training a language model on a Markov source: the loss curve
    and the floor of the data beside it, the held-out loss and the floor on those very tokens,
    and the share of impossible transitions in greedy text started from the held-out rows'
    first tokens (the model is left in eval mode)."""
    model.eval()
    keep = None if pad is None else val[:, 1:] != pad
    text = greedy(model, val[:64, :1], val.shape[1] - 2)
    return {"losses": list(losses), "first_loss": losses[0], "final_loss": losses[-1],
            "train_loss": statistics.median(losses[-10:]), "floor": source.floor,
            "val_loss": next_token_loss(model, val, pad), "val_floor": source.oracle_loss(val, keep),
            "generated_impossible": source.impossible(text)}


@lru_cache(maxsize=1)
def corpus() -> str:
    """The shipped public-domain text, its comment lines removed."""
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    return "\n".join(ln for ln in lines if not ln.startswith("#")) + "\n"
