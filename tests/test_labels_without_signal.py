"""LABELS_SHUFFLED from a training run, however validation is recorded: a classifier whose
training loss falls well below the chance level while no validation loss gets below it has
labels that carry no signal, with or without a validation loss before training.

The chance level is the loss of predicting the classes' shares (their entropy; ln C when
they are unknown). Broken and healthy pairs on the digits, with validation recorded after
each epoch, every N steps and once at the end; then the runs that must stay quiet: a first
validation loss recorded late, a slow learner, imbalanced classes, a run that overfits, a
validation loss summed over batches, regression. Then the rule itself on hand-written
evidence, on both sides of each threshold."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from torch import nn

from broken_models.datasets import digits
from lesson import NetworkDebugger
from lesson.debugger.rules import Evidence, Thresholds, rule_labels_without_signal

TH = Thresholds()


def train(seed: int, *, shuffled: bool, record: str, steps: int = 300, lr: float = 3e-3,
          sgd: bool = False, n_train: int = 1000, hidden: int = 128, first_val: int = 0,
          classes: str = "digits", summed: bool = False, weighted: bool = False) -> dict:
    """An MLP on the digits under the debugger, mini-batches of 64; the validation loss (the
    criterion's mean over the validation split, eval mode, no gradients) recorded after each
    epoch (`record="epoch"`), every 25 steps ("steps") or once after training ("end"), from
    step `first_val` on. `classes="imbalanced"`: digits 1 and 2 against all others (8:1:1)."""
    torch.manual_seed(seed)
    x, y, xv, yv = digits(seed, n_train=n_train)
    if classes == "imbalanced":
        y, yv = (torch.where((t == 1) | (t == 2), t, 0) for t in (y, yv))
    if shuffled:
        y = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(seed + 99))]
    n_classes = int(y.max()) + 1
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))
    opt = (torch.optim.SGD(model.parameters(), lr=lr) if sgd
           else torch.optim.Adam(model.parameters(), lr=lr))
    crit = nn.CrossEntropyLoss(weight=torch.ones(n_classes) if weighted else None)
    g = torch.Generator().manual_seed(seed)
    vals: list[float] = []

    def validate(dbg: NetworkDebugger) -> None:
        model.eval()
        with torch.no_grad():
            if summed:    # the classic slip: batch losses added up, never divided
                v = sum(crit(model(xv[i:i + 50]), yv[i:i + 50]) for i in range(0, len(xv), 50))
            else:
                v = crit(model(xv), yv)
        model.train()
        vals.append(float(v))
        dbg.record_val_loss(v)

    with NetworkDebugger(model, opt, crit) as dbg:
        step = 0
        while step < steps:
            for idx in torch.randperm(len(x), generator=g).split(64):
                opt.zero_grad()
                loss = crit(model(x[idx]), y[idx])
                loss.backward()
                opt.step()
                dbg.record_loss(loss.detach())
                step += 1
                if record == "steps" and step % 25 == 0 and step >= first_val:
                    validate(dbg)
                if step == steps:
                    break
            if record == "epoch" and step >= first_val:
                validate(dbg)
        if record == "end":
            validate(dbg)
        codes = {f.code for f in dbg.diagnose()}
        chance = dbg.chance_loss()
        val_chance = dbg.chance_loss(validation=True)
    losses = dbg.loss_history
    return {"codes": codes, "chance": chance, "val_chance": val_chance, "vals": vals,
            "train_end": sum(losses[-10:]) / 10}


RECORDS = ["epoch", "steps", "end"]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("record", RECORDS)
def test_shuffled_labels_are_found_however_validation_is_recorded(seed, record):
    run = train(seed, shuffled=True, record=record)
    chance = math.log(10)
    # the symptom: the training labels are being fitted, validation never gets below chance
    assert run["train_end"] < 0.7 * chance and min(run["vals"]) > 0.95 * chance
    assert run["chance"] == pytest.approx(chance, rel=0.01)     # the digits are balanced
    assert "LABELS_SHUFFLED" in run["codes"] and "OVERFITTING" not in run["codes"]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("record", RECORDS)
def test_real_labels_are_quiet_however_validation_is_recorded(seed, record):
    run = train(seed, shuffled=False, record=record)
    assert min(run["vals"]) < 0.2 * math.log(10)
    assert run["codes"] == set()


@pytest.mark.parametrize("record", ["epoch", "steps"])
def test_a_first_validation_loss_recorded_late(record):
    """Validation from step 200 only: the healthy run's first validation loss is already far
    below chance (no 'untrained' reference), the broken one's already far above it."""
    healthy = train(0, shuffled=False, record=record, first_val=200)
    broken = train(0, shuffled=True, record=record, first_val=200)
    assert healthy["vals"][0] < 0.1 * math.log(10) < math.log(10) < broken["vals"][0]
    assert healthy["codes"] == set()
    assert "LABELS_SHUFFLED" in broken["codes"]


@pytest.mark.parametrize("record", RECORDS)
def test_a_slow_learner_is_not_judged(record):
    """Plain SGD at 3e-3: after 400 steps the healthy run is still above 0.7 x chance; the
    broken one has not fitted its labels at all (training loss near chance): neither is
    LABELS_SHUFFLED."""
    healthy = train(0, shuffled=False, record=record, sgd=True, lr=3e-3, steps=400)
    broken = train(0, shuffled=True, record=record, sgd=True, lr=3e-3, steps=400)
    assert healthy["train_end"] > 0.7 * math.log(10)
    assert broken["train_end"] > 0.95 * math.log(10)
    assert "LABELS_SHUFFLED" not in healthy["codes"] | broken["codes"]


@pytest.mark.parametrize("record", RECORDS)
def test_imbalanced_classes_are_judged_against_their_shares(record):
    """8:1:1 classes: chance is the shares' entropy (~0.64), not ln 3 (1.10). Shuffled
    labels stay above it; real ones get far below it."""
    broken = train(0, shuffled=True, record=record, classes="imbalanced")
    healthy = train(0, shuffled=False, record=record, classes="imbalanced")
    prior = broken["chance"]
    assert 0.5 < prior < 0.8 and broken["val_chance"] == pytest.approx(prior, rel=0.15)
    assert min(broken["vals"]) > 0.9 * prior and min(broken["vals"]) < 0.9 * math.log(3)
    assert "LABELS_SHUFFLED" in broken["codes"]
    assert min(healthy["vals"]) < 0.3 * prior and healthy["codes"] == set()


def test_a_weighted_criterion_is_judged_against_ln_c():
    """Class weights change what predicting the shares costs; the uniform guess still costs
    ln C, so that is the chance level then."""
    run = train(0, shuffled=True, record="epoch", classes="imbalanced", weighted=True)
    assert run["chance"] == pytest.approx(math.log(3)) and run["val_chance"] is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_run_that_overfits_is_overfitting_not_shuffled(seed):
    """50 training samples, a wide net, 600 steps: the validation loss rises above its best
    (OVERFITTING) but was far below chance before. (With 100 samples the rise on seeds 1 and
    2 was 3-6%, too little to call overfitting.)"""
    run = train(seed, shuffled=False, record="steps", n_train=50, hidden=512, steps=600)
    assert run["vals"][-1] > min(run["vals"]) and min(run["vals"]) < 0.5 * math.log(10)
    assert "LABELS_SHUFFLED" not in run["codes"]
    assert "OVERFITTING" in run["codes"]


@pytest.mark.parametrize("record", ["epoch", "steps"])
def test_a_validation_loss_summed_over_batches_is_not_chance(record):
    """A validation loss summed over its 10 batches sits above ln 10 even when the run is
    healthy, but it falls with the training loss; without signal it does not."""
    healthy = train(0, shuffled=False, record=record, sgd=True, lr=0.01, steps=400,
                    summed=True)
    broken = train(0, shuffled=True, record=record, summed=True)
    assert min(healthy["vals"]) > math.log(10)       # far above chance, in its units
    assert healthy["codes"] == set()
    assert "LABELS_SHUFFLED" in broken["codes"]


def regression_codes(shuffled: bool, record: str) -> set[str]:
    """A regression (MSE) with its targets shuffled or not: no chance level applies."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x, xv = torch.randn(1024, 8, generator=g), torch.randn(256, 8, generator=g)
    w = torch.randn(8, 1, generator=g)
    y, yv = x @ w, xv @ w
    if shuffled:
        y = y[torch.randperm(len(y), generator=g)]
    model = nn.Sequential(nn.Linear(8, 128), nn.ReLU(), nn.Linear(128, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    crit = nn.MSELoss()
    with NetworkDebugger(model, opt, crit) as dbg:
        for epoch in range(12):
            for idx in torch.randperm(1024, generator=g).split(64):
                opt.zero_grad()
                loss = crit(model(x[idx]), y[idx])
                loss.backward()
                opt.step()
                dbg.record_loss(loss.detach())
            if record == "epoch" or epoch == 11:
                with torch.no_grad():
                    dbg.record_val_loss(crit(model(xv), yv))
        assert dbg.chance_loss() is None
        return {f.code for f in dbg.diagnose()}


@pytest.mark.parametrize("record", ["epoch", "end"])
def test_regression_has_no_chance_level_and_is_quiet(record):
    assert "LABELS_SHUFFLED" not in regression_codes(False, record)


# -- the rule on hand-written evidence: both sides of each threshold ---------------------------
CHANCE = math.log(10)


def evidence(vals: list[float], train_level: float = 0.5 * CHANCE, every: int = 40,
             **kw) -> Evidence:
    """A run whose training loss falls linearly from chance to `train_level`, validation
    recorded every `every` steps."""
    n = every * len(vals)
    losses = [CHANCE + (train_level - CHANCE) * min(1.0, i / (n / 2)) for i in range(n)]
    return Evidence(losses=losses, val_losses=list(vals),
                    val_at=[every * (k + 1) for k in range(len(vals))],
                    chance_loss=kw.pop("chance", CHANCE), **kw)


def found(ev: Evidence, th: Thresholds = TH) -> bool:
    return [f.code for f in rule_labels_without_signal(ev, th)] == ["LABELS_SHUFFLED"]


def test_margin_below_chance():
    edge = (1 - TH.no_signal_chance_margin) * CHANCE
    assert found(evidence([CHANCE, 1.01 * edge, CHANCE * 1.2]))
    assert not found(evidence([CHANCE, 0.99 * edge, CHANCE * 1.2]))
    assert found(evidence([1.01 * edge]))                  # one validation loss, at the end
    assert not found(evidence([0.99 * edge]))


def test_the_training_loss_must_have_fitted_well_below_chance():
    level = TH.no_signal_chance_fit * CHANCE
    assert found(evidence([CHANCE, CHANCE], train_level=0.99 * level))
    assert not found(evidence([CHANCE, CHANCE], train_level=1.01 * level))


def test_the_training_level_is_read_just_before_each_validation_point():
    """The mean of the last `no_signal_window` training losses before the validation loss:
    a fit reached only after the last validation point does not count."""
    ev = evidence([CHANCE])
    ev.losses[-TH.no_signal_window:] = [0.78 * CHANCE] * TH.no_signal_window
    ev.losses[:-TH.no_signal_window] = [CHANCE] * (len(ev.losses) - TH.no_signal_window)
    assert found(ev)
    assert not found(ev, replace(TH, no_signal_window=TH.no_signal_window + 4))
    late = replace(ev, val_at=[len(ev.losses) - TH.no_signal_window])   # recorded before it
    assert not found(late)


def test_a_validation_loss_that_follows_the_training_loss_is_in_other_units():
    follow = TH.no_signal_follow
    first = 10 * CHANCE            # summed over ten batches, say
    assert found(evidence([first, (1 - follow) * first * 1.01]))
    assert not found(evidence([first, (1 - follow) * first * 0.99]))


def test_the_validation_shares_set_the_validation_chance_level():
    """Validation targets with other shares than training's have their own chance level."""
    val_chance = 0.6 * CHANCE
    vals = [0.95 * val_chance, val_chance]
    assert found(evidence(vals, val_chance_loss=val_chance))
    assert not found(evidence(vals))              # against the training chance: below it


def test_nothing_to_judge():
    assert not found(evidence([]))
    assert not found(evidence([CHANCE, float("nan")]))
    assert not found(evidence([CHANCE], chance=0.0))     # one class only
    short = evidence([CHANCE])
    short.losses = short.losses[:TH.min_losses - 1]
    short.val_at = [len(short.losses)]
    assert not found(short)
