"""LABELS_SHUFFLED for token targets that do not follow the inputs: the loss falls to the
entropy of the targets' own frequencies and stays there (`rules.rule_targets_at_prior`), while
the targets, one per input token, are not those tokens shifted by one
(`SequenceWatch.targets_unaligned`). Each threshold on both sides of its edge, each condition
false alone, then a language model whose targets a transpose scrambled, beside its twin."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from lesson import NetworkDebugger
from lesson.debugger import rules
from lesson.debugger import sequences as S
from lesson.findings import sort_findings

TH = rules.Thresholds()
H = 2.0                                         # the targets' marginal entropy in these runs


def _codes(*, start: float = 3.0, before: float = H, last: float = H, n: int = 40,
           unaligned: bool | None = True, entropy: float | None = H) -> list[str]:
    """A run starting at `start` (its first three losses), at `before` over its third quarter
    and `last` over its fourth."""
    q = n // 4
    curve = [start] * 3 + [H] * (n - 2 * q - 3) + [before] * q + [last] * q
    ev = rules.Evidence(losses=curve, steps=n, marginal_entropy=entropy,
                        targets_unaligned=unaligned)
    return [f.code for f in rules.rule_targets_at_prior(ev, TH)]


def test_the_loss_must_have_fallen_to_the_prior_from_above():
    assert _codes(start=TH.prior_start * H) == ["LABELS_SHUFFLED"]
    assert _codes(start=TH.prior_start * H - 1e-3) == []     # it started there: learnt nothing


@pytest.mark.parametrize("last, found", [
    (TH.prior_level * H + 1e-9, True), (TH.prior_level * H - 1e-3, False),   # learnt below it
    ((2 - TH.prior_level) * H - 1e-9, True),
    ((2 - TH.prior_level) * H + 1e-3, False),                                # never got there
])
def test_the_last_quarter_sits_at_the_prior(last, found):
    assert (_codes(before=last, last=last) == ["LABELS_SHUFFLED"]) is found


def test_a_loss_still_falling_is_not_at_the_prior():
    edge = H * (1 - TH.warmup_stall_fall)
    assert _codes(before=H, last=edge + 1e-6) == ["LABELS_SHUFFLED"]
    assert _codes(before=H * 1.04, last=H * 1.04 * (1 - TH.warmup_stall_fall) - 1e-3) == []


def test_each_other_condition_false_alone():
    assert _codes(unaligned=False) == []                    # the targets follow the inputs
    assert _codes(unaligned=None) == []                     # no token targets compared
    assert _codes(entropy=None) == [] and _codes(entropy=0.0) == []
    assert _codes(n=4 * TH.min_losses - 1) == []            # too short to tell
    assert _codes(n=4 * TH.min_losses) == ["LABELS_SHUFFLED"]
    ev = rules.Evidence(losses=[3.0] * 3 + [H] * 36 + [float("nan")], steps=40,
                        marginal_entropy=H, targets_unaligned=True)
    assert rules.rule_targets_at_prior(ev, TH) == []        # NaN has its own finding


def test_the_finding_says_what_it_read():
    ev = rules.Evidence(losses=[4.0] * 3 + [H] * 37, steps=40, marginal_entropy=H,
                        targets_unaligned=True)
    (f,) = rules.rule_targets_at_prior(ev, TH)
    assert f.evidence == {"loss_start": 4.0, "loss_last_quarter": H, "marginal_entropy": H,
                          "steps": 40}
    assert "100% of the entropy" in f.message and "shifted by one" in f.message


# -- the targets against the inputs ---------------------------------------------------------------
def _unaligned(x: torch.Tensor, y: torch.Tensor | None) -> bool | None:
    watch = S.SequenceWatch(nn.Embedding(50, 4), lambda *a: None)
    watch.on_train_forward((x,), {}, 0, True, [])
    if y is not None:
        logits = torch.zeros(y.numel(), 50)
        watch.on_call(F.cross_entropy, (logits, y.reshape(-1)), {},
                      F.cross_entropy(logits, y.reshape(-1)), "", 0, True)
    return watch.targets_unaligned()


def test_targets_unaligned_reads_the_relations():
    text = torch.randint(1, 50, (6, 41), generator=torch.Generator().manual_seed(0))
    x, y = text[:, :-1], text[:, 1:]
    assert _unaligned(x, y) is False                          # next tokens
    assert _unaligned(x, x) is False                          # copies: TARGETS_NOT_SHIFTED's
    assert _unaligned(x, y.t().reshape(6, 40)) is True        # scrambled by a transpose
    assert _unaligned(x, y[torch.randperm(6)]) is True        # another row's next tokens
    assert _unaligned(x, None) is None                        # no loss seen
    assert _unaligned(x[:2, :7], y[:2, :7].flip(1)) is None   # 14 targets: too few to judge
    assert _unaligned(x, y[:, 0]) is None                     # one target per row: a classifier


# -- a language model whose targets a transpose scrambled ---------------------------------------
def _language_model(transposed: bool, seed: int = 0) -> tuple[list[float], list, float]:
    """A small causal LM on a Markov source, 300 steps; the loss flattens the targets
    `y.t()` (time-major) against batch-major logits when `transposed`."""
    from broken_models.tokens import markov_source

    torch.manual_seed(seed)
    vocab, batch, length, width = 16, 24, 20, 32
    source = markov_source(seed, vocab=vocab)
    g = torch.Generator().manual_seed(seed)
    data = source.sample(2048, length + 1, g)
    layer = nn.TransformerEncoderLayer(width, 2, 2 * width, dropout=0.0, batch_first=True,
                                       norm_first=True)

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.position = nn.Embedding(vocab, width), nn.Embedding(length, width)
            self.body = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            h = self.embed(tokens) + self.position(torch.arange(t))
            return self.head(self.body(h, mask=nn.Transformer.generate_square_subsequent_mask(t),
                                       is_causal=True))

    model = LM()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    with NetworkDebugger(model, optimizer) as debugger:
        for _ in range(300):
            rows = data[torch.randint(len(data), (batch,), generator=g)]
            x, y = rows[:, :-1], rows[:, 1:]
            logits = model(x)
            targets = y.t().reshape(-1) if transposed else y.reshape(-1)
            loss = F.cross_entropy(logits.reshape(-1, vocab), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            debugger.record_loss(loss.detach())
    return debugger.loss_history, debugger.diagnose(), debugger.evidence().marginal_entropy


def test_a_language_model_with_scrambled_targets_learns_only_their_frequencies():
    losses, found, entropy = _language_model(transposed=True)
    # the symptom: the loss falls from ln 16 to the targets' marginal entropy and stays
    assert losses[0] > 1.2 * entropy and abs(sum(losses[-50:]) / 50 - entropy) < 0.05 * entropy
    causes = [f.code for f in sort_findings(found) if not f.explained_by]
    assert causes == ["LABELS_SHUFFLED"], [(f.code, f.message[:80]) for f in found]

    losses, found, entropy = _language_model(transposed=False)
    assert sum(losses[-50:]) / 50 < 0.8 * entropy              # the twin learns from its inputs
    assert "LABELS_SHUFFLED" not in [f.code for f in found]
