"""Evidence -> findings: the debugger's judgement, with every threshold named in one place.

The monitor gathers numbers (`Evidence`); the rules here decide what they mean. Rules never
touch hooks or tensors: they read plain Python records, so each one can be tested on
hand-written evidence, and a reader can check every threshold against its reason below.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from lesson.findings import Finding, layer_of


@dataclass
class ModeEvidence:
    """Passes run in the wrong train/eval mode: how many, where, when first."""

    count: int = 0
    modules: list[str] = field(default_factory=list)
    first_step: int | None = None

    def add(self, names: list[str], step: int) -> None:
        self.count += 1
        if self.first_step is None:
            self.first_step = step
            self.modules = names


@dataclass(frozen=True)
class Thresholds:
    """Every number the rules compare against, with the reason it has that value."""

    dead_fraction: float = 0.5
    """DEAD_NEURONS: share of a ReLU layer's units that output 0 for every sample of the batch.
    A healthy ReLU layer has about half its *outputs* at 0 but almost no unit that is 0 for
    every sample; "most units dead" is the lesson's >50%, applied to units, not outputs."""
    dead_min_samples: int = 4
    """A unit is only called dead when at least this many samples all gave it 0."""
    recent_records: int = 3
    """Layer-level findings must hold in each of the latest records (up to this many)."""
    collapse_ratio: float = 1e-4
    """COLLAPSED_ACTIVATIONS: spread across the batch / the layer's own scale below this."""
    exploding_activation_rms: float = 1e3
    """EXPLODING_ACTIVATIONS: root-mean-square of a layer's output above this (inputs and
    healthy layers sit near 1; the lesson flags |mean| > 10, which a 100x scaled input hits)."""
    activation_growth: float = 1e2
    """EXPLODING_ACTIVATIONS: a layer's rms grew by this factor between first and last record."""
    vanishing_ratio: float = 1e-3
    """VANISHING_GRADIENT: relative gradient (||grad|| / ||weight||) of the first weight layer
    over that of the last one below this: three orders of magnitude. (Not while the first
    layer's own relative gradient is at `exploding_grad_to_weight`: that layer is not starving.)"""
    vanishing_min_layers: int = 3
    """Vanishing gradients need depth: at least this many weight layers."""
    vanishing_learned_fall: float = 0.05
    """VANISHING_GRADIENT is not read from a run whose loss's last quarter fell below this
    share of its first quarter: the network learned, and near the minimum of a deep ReLU net
    the last layer's gradient dominates without any layer starving."""
    exploding_grad_to_weight: float = 10.0
    """EXPLODING_GRADIENT: total gradient norm over total weight norm above this."""
    exploding_grad_norm: float = 1e4
    """EXPLODING_GRADIENT: total gradient norm above this, whatever the weights."""
    grad_growth: float = 1e2
    """EXPLODING_GRADIENT: total gradient norm grew by this factor since the first record."""
    clip_percentile: float = 90.0
    """The suggested clip value is this percentile of the total gradient norm of healthy steps:
    steps before the explosion whose norm is within `clip_calm_factor` of the early median."""
    clip_calm_factor: float = 3.0
    """A step counts as healthy when its gradient norm is within this factor of the median of
    the first quarter of the run (before any growth)."""
    lr_high_update_ratio: float = 1.0
    """LR_TOO_HIGH: typical update/weight ratio at or above this (each step moves a weight
    matrix by its own size; the usual rule of thumb is ~1e-3)."""
    lr_high_progress: float = 0.1
    """...unless the loss's last quarter averages under this share of its first: updates of a
    weight's own size that keep the loss falling tenfold are what a line search takes
    (L-BFGS), not a rate too high. Likewise a loss that became NaN/Inf right after falling
    tenfold to its lowest value met an unsafe operation (log of 0, exp overflow: see
    locate_nonfinite), not a rate too high, which makes the loss climb first."""
    lr_high_ratio_with_bad_loss: float = 1e-2
    """LR_TOO_HIGH when the loss also rises, oscillates or blows up: ratio above this."""
    loss_rise: float = 1.1
    """The loss 'rises' when its last quarter averages this much more than its first quarter..."""
    rise_val_progress: float = 0.5
    """...unless the last validation loss is at most this share of the first: a model worse
    at its training objective does not halve its held-out loss, so a training loss that rises
    while validation improves that much is a moving target, not a rate too high (a GAN
    generator's loss climbs to ln 2 as its discriminator learns, while its samples reach the
    data: the fixed twin of the real fault tr_gan_generator_detach, 10 seeds of 20)."""
    loss_blowup: float = 10.0
    """The loss 'blows up' when it reaches this many times its first value."""
    oscillation_sign_changes: float = 0.5
    """OSCILLATING: share of consecutive differences that change sign, at least this..."""
    oscillation_amplitude: float = 0.1
    """...with a mean |difference| of at least this share of the loss level."""
    lr_oscillation_amplitude: float = 0.5
    """LR_TOO_HIGH from oscillation needs jumps of half the loss level and no progress."""
    not_decreasing: float = 0.99
    """NOT_DECREASING (lesson verdict): last-10 mean >= this x first-10 mean."""
    chance_share: float = 0.95
    """NOT_DECREASING (lesson verdict) also when the last-10 mean is at least this share of the
    chance-level loss (ln C for C classes): a run stuck at chance is never healthy, even when
    its first losses were above chance (a bad initialisation that it only undid)."""
    oscillation_progress: float = 0.5
    """OSCILLATING needs the run to have kept less than this share of its first-quarter loss
    off (1 - last quarter / first quarter): mini-batch noise on a loss that fell by half or
    more is the noise of a healthy run, not oscillation."""
    min_losses: int = 8
    """Trend rules need at least this many recorded losses."""
    lr_low_update_ratio: float = 1e-4
    """LR_TOO_LOW: typical update/weight ratio below this..."""
    trained_update_ratio: float = 1e-2
    """LR_TOO_HIGH/LR_TOO_LOW advice: an update/weight ratio that trains a short run (the
    lesson's ~1e-3 is for long ones); the advice names the factor that brings the run's
    ratio there, to the nearest power of 10."""
    init_scale: float = 2.0
    """EXPLODING_ACTIVATIONS advice: a weight whose rms times sqrt(fan_in) is above this
    (Kaiming's ReLU init gives sqrt(2), PyTorch's default 0.58, an orthogonal matrix its
    gain) starts too large: re-initialise it, rather than normalise around it."""
    lr_low_loss_change: float = 0.02
    """...while the loss changed by less than this share over the run..."""
    lr_low_grad_ratio: float = 1e-3
    """...and gradients are not tiny (||grad|| / ||weight|| above this: not converged)."""
    lr_decay_factor: float = 1e-3
    """LR_DECAYED: the learning rate fell below this share of its peak..."""
    lr_decay_min_share: float = 0.1
    """...and stayed there for at least this share of the run (a cosine schedule touches 0
    only in its last ~2% of steps)."""
    lr_decay_min_steps: int = 5
    """...and for at least this many steps."""
    stale_grad_ratio: float = 0.01
    """MISSING_ZERO_GRAD: the gradient left in .grad at the first backward after a step is
    above this share of the gradient the step then sees..."""
    stale_share: float = 0.5
    """...for at least this share of the parameters checked."""
    not_updated_grad_ratio: float = 1e-3
    """PARAMS_NOT_UPDATED: a tensor that did not move must have had a gradient of at least this
    share of its norm (a conv bias before batch norm gets ~0 gradient, and its SGD update
    rounds away in float32: that is not the bug)."""
    min_events: int = 2
    """Bookkeeping and mode rules need at least this many offending steps or passes."""
    mode_share: float = 0.5
    """EVAL_MODE_DURING_TRAINING: share of training passes run in eval mode."""
    symmetric_spread: float = 1e-6
    """SYMMETRIC_WEIGHTS: largest difference between rows / largest |weight| below this."""
    overfit_rise: float = 0.05
    """OVERFITTING: the last validation loss is this share above its best..."""
    overfit_min_rise: float = 0.02
    """...and at least this much above it in absolute terms (a rise from 0.010 to 0.011 at
    99.8% accuracy is noise, whatever its share)..."""
    overfit_give_back: float = 0.1
    """...and the rise gives back at least this share of what validation gained from its
    first value to its best..."""
    overfit_sustained: int = 2
    """...for each of the last this many validation points (a sustained rise, not one bad
    evaluation)..."""
    overfit_after_best: int = 2
    """...at least this many validation points after the best one."""
    cleared_share: float = 0.5
    """ZERO_GRAD_IN_ACCUMULATION: gradients cleared between two backward passes of one
    optimizer step in at least this share of the steps with several passes at the same weights
    (and in at least `min_events` of them). Passes at weights changed in between (SAM's ascent
    step, a closure called by a line search) are no accumulation."""
    frozen_move_ratio: float = 1e-7
    """FROZEN_PARAMS_MOVE: a parameter without gradient (an all-zero .grad, or one left over
    unchanged from an earlier step; one set by hand is a gradient) moved by more than this
    share of its norm at one optimizer step (float32 rounding moves nothing; momentum moves ~lr)..."""
    frozen_move_events: int = 1
    """...at this many statistics steps: a tensor without gradient that moves is never noise,
    so one statistics step is enough (at the default schedule one comes every 50 steps)."""
    no_signal_min_val: int = 3
    """LABELS_SHUFFLED from a training run: at least this many recorded validation losses..."""
    no_signal_val_margin: float = 0.2
    """...none of them this share below the loss of the untrained model (the mean of the
    first `no_signal_start` training losses: ln K for a K-class classifier, the chance level)
    nor below the first validation loss (so a validation loss summed instead of averaged, or
    one first recorded late, is never mistaken for chance)..."""
    no_signal_start: int = 3
    """...(the untrained loss is the mean of this many first training losses)..."""
    no_signal_train_fit: float = 0.8
    """...while the training loss of the last quarter fell to this share of the untrained
    loss (with real labels the validation loss follows the training loss down early in
    training, before any gap opens; the untrained loss can sit above ln K, hence the
    validation margin's 20%): the model fits its training
    labels and learns nothing that carries to new inputs.
    Real labels, even noisy or overfitted ones, bring the validation loss well below chance
    at some point; labels misaligned with their inputs never do.
    (This is the rule when the chance level is unknown: regression, a loss the debugger does
    not know. A classifier's is judged against its chance level, below.)"""
    no_signal_chance_margin: float = 0.1
    """LABELS_SHUFFLED for a classifier: every recorded validation loss at or above the
    chance-level loss less this share. The chance level is the entropy of the validation
    targets' class shares (the loss of predicting them, which nothing learned beats), or of
    the training targets' when the evaluation passes' targets were not seen, or ln C when
    neither is known. A model that learned nothing comes within a few percent of it (a
    9:1 split's entropy moves by ~10% with a 500-sample validation split's share of the
    minority class), while real labels, even 60% noisy ones over 10 classes, bring the
    validation loss 19% below it..."""
    no_signal_chance_fit: float = 0.8
    """...while at one validation point at least the training loss (the mean of the last
    `no_signal_window` before it) had fallen to this share of the chance level: the model
    fits its training labels, beyond their prior, and it carries nothing to new inputs (with
    real labels the validation loss follows the training loss below chance before any gap
    opens; a model still near chance, slow or early, is not judged). Needs no validation
    loss before training: the chance level is known without one..."""
    no_signal_window: int = 10
    """...(this many training losses before a validation point give the training loss
    there)..."""
    no_signal_follow: float = 0.25
    """...unless, once the training loss is below chance, the validation loss still falls by
    this share of its value: a validation loss in other units than the training loss (summed
    over batches or samples instead of averaged) falls with real labels wherever it lies,
    while without signal it stays flat or rises as the model memorises."""
    warmup_window: int = 200
    """WARMUP_MISSING looks at the first this many losses (or the first quarter of the run if
    longer): the steps a warm-up would have covered."""
    warmup_start_share: float = 0.5
    """...of a run whose learning rate at the first step was at least this share of its peak
    (no warm-up: a warm-up starts at a few percent of it)..."""
    warmup_blowup: float = 2.0
    """...when the loss in that window became NaN/Inf, reached this many times its first value,
    or its last quarter averaged `loss_rise` times its first: it blew up at the start. Only for
    transformers (attention seen or held) that are not all pre-LN (norm_first=True layers
    train without warm-up; a blow-up there is LR_TOO_HIGH alone)."""
    warmup_stall: float = 0.85
    """WARMUP_MISSING's other form, a stall: the last quarter of that window averaged at least
    this share of the marginal entropy of the targets (the loss of a model that predicts each
    class at its frequency and ignores its input: the level a post-LN stack broken by its
    first steps falls to and stays at: down to 0.886 of it on the catalogue's 200 seeds
    (post_ln_no_warmup, seed 109); a model that learns gets well below it)..."""
    warmup_stall_fall: float = 0.02
    """...and flat there: from the start of that last quarter to the end of the run, the second
    half no more than this share below the first (a model still learning slowly falls
    steadily; a stalled one does not; the halves span the rest of the run, so that minibatch
    noise around the plateau does not read as a fall)..."""
    warmup_update_ratio: float = 0.05
    """...after first updates that moved the weight matrices by at least this share of their
    norm (the median over them at the first step): Adam's first steps are about the learning
    rate in size whatever the gradient, lr * sqrt(fan_in) relative to a default init, and a
    rate that large unwarmed is what breaks a post-LN stack. Rates that train transformers
    without warm-up move them by 1e-3 to 3e-2; other bugs that leave a model at its marginal
    entropy (an attention bug, a mask the wrong way round) have their own findings."""
    prior_start: float = 1.2
    """LABELS_SHUFFLED for targets one per input token that are not the tokens shifted by one
    (nor copies of them): the loss started at least this many times the entropy of the targets'
    own frequencies (the loss of a model that predicts each target at its frequency, whatever
    the input; an untrained model starts well above it)..."""
    prior_level: float = 0.95
    """...and its last quarter averaged within this share of that entropy (above or below),
    as flat as a stall (`warmup_stall_fall`): the model learned which targets are frequent and
    nothing from its inputs. Aligned targets (a language model's next tokens) take a model
    below that level within a few hundred steps; misaligned ones (a transpose or reshape that
    mixes rows, targets drawn at other indices) never can."""


@dataclass
class Evidence:
    """What the monitor saw, as plain Python values."""

    history: list[dict[str, Any]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    val_losses: list[float] = field(default_factory=list)
    val_at: list[int] = field(default_factory=list)
    lrs: list[tuple[int, float]] = field(default_factory=list)
    steps: int = 0
    optimizer_steps: int = 0
    backwards: int = 0
    has_optimizer: bool = False
    layer_order: list[str] = field(default_factory=list)
    layer_kinds: dict[str, str] = field(default_factory=dict)
    never_grad: list[str] = field(default_factory=list)
    unstepped: dict[str, int] = field(default_factory=dict)
    symmetric: dict[str, dict[str, float]] = field(default_factory=dict)
    eval_mode_training: Any = None
    train_mode_eval: Any = None
    #: optimizer steps that ran several backward passes, and those of them where the
    #: gradients were cleared between two passes (see ZERO_GRAD_IN_ACCUMULATION)
    accumulating_steps: int = 0
    cleared_steps: list[int] = field(default_factory=list)
    #: parameter -> (statistics steps it moved without a gradient, largest relative move)
    moved_without_grad: dict[str, tuple[int, float]] = field(default_factory=dict)
    stochastic_eval: Any = None      # stochastic.StochasticEvalEvidence
    #: a classifier's chance-level loss (the training prior's entropy, or ln C); None when
    #: the run is not classification or its criterion is unknown
    chance_loss: float | None = None
    #: the same for the validation targets (their class shares' entropy), when seen
    val_chance_loss: float | None = None
    #: the model computes attention (seen, or attention layers held): WARMUP_MISSING's scope
    transformer: bool = False
    #: its nn.Transformer*Layers normalise after the residual (True), before it (False), or
    #: there are none to tell (None: hand-written blocks)
    post_ln: bool | None = None
    #: entropy (nats) of the loss's targets' own frequencies: a model that ignores its input
    marginal_entropy: float | None = None
    #: the targets are one per input token but not those tokens shifted by one (nor copies of
    #: them): None when no loss compared targets with token inputs
    targets_unaligned: bool | None = None


def _finite(v: Any) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _change(ratio: float) -> str:
    """A ratio of a new value to an old one in words that say which way it went: "grew 3.2x",
    "shrank 5.3x" (not "grew 0.19x"), "stayed the same"."""
    if not _finite(ratio) or ratio <= 0:
        return f"changed {ratio:.2g}x"
    if abs(ratio - 1) < 0.005:
        return "stayed the same"
    return f"grew {ratio:.2g}x" if ratio > 1 else f"shrank {1 / ratio:.2g}x"


def _decades(ratio: float) -> str:
    """A factor as the power of 10 nearest to it, in words: "100x", "100,000x"."""
    return f"{10 ** max(1, round(math.log10(ratio))):,.0f}x"


def _rate_advice(way: str, ratio: float | None, th: Thresholds) -> str:
    """LR_TOO_HIGH / LR_TOO_LOW advice: the search the lesson teaches (10x at a time), and
    how far the run's own update/weight ratio says to go."""
    verb = "Lower" if way == "lower" else "Raise"
    text = (f"{verb} the learning rate 10x at a time until the loss falls steadily "
            "(find_learning_rate sweeps for one)")
    if ratio is not None and _finite(ratio) and ratio > 0:
        factor = ratio / th.trained_update_ratio if way == "lower" else \
            th.trained_update_ratio / ratio
        if factor > 3:
            text += (f": the updates move the weights by {ratio:.2g} of their norm per step, "
                     f"where about {th.trained_update_ratio:g} trains, so expect about "
                     f"{_decades(factor)}")
    return text + "."


def _held_down(ev: Evidence) -> str:
    """For a rate too low: a schedule that was still raising the rate when the run ended (a
    warm-up longer than the run) is what holds it down."""
    lrs = [lr for _, lr in ev.lrs if _finite(lr) and lr > 0]
    if len(lrs) >= 2 and lrs[-1] >= max(lrs) and lrs[-1] > 3 * lrs[0]:
        return (f"The learning rate was still rising when the run ended ({lrs[0]:.2g} to "
                f"{lrs[-1]:.2g}): a warm-up or schedule longer than the run holds it down; "
                "shorten it to a small share of the run. Or: ")
    return ""


def _sig(x: float) -> float:
    """Round to two significant digits (evidence and suggestions read better)."""
    return float(f"{x:.2g}") if _finite(x) and x != 0 else x


# -- loss curve ----------------------------------------------------------------------------------
def _quarters(losses: list[float]) -> tuple[float, float]:
    q = max(1, len(losses) // 4)
    return _mean(losses[:q]), _mean(losses[-q:])


def oscillation(losses: list[float], reference: float) -> tuple[float, float, float]:
    """(share of sign changes, mean |diff| / loss level, net change / total variation)."""
    d = [b - a for a, b in zip(losses, losses[1:])]
    if len(d) < 2:
        return 0.0, 0.0, 1.0
    changes = sum(1 for a, b in zip(d, d[1:]) if a * b < 0) / (len(d) - 1)
    level = max(_mean([abs(v) for v in losses]), 1e-3 * abs(reference), 1e-12)
    total = sum(abs(x) for x in d)
    net = abs(losses[-1] - losses[0]) / total if total > 0 else 1.0
    return changes, _mean([abs(x) for x in d]) / level, net


def loss_verdict(losses: list[float], th: Thresholds = Thresholds(),
                 chance: float | None = None) -> str:
    """The lesson's words for a loss curve, decided the way the lesson meant them. `chance`
    (optional) is the loss of a model that guesses (ln C for C classes)."""
    if len(losses) < 2:
        return "NOT_ENOUGH_DATA"
    if any(not math.isfinite(v) for v in losses):
        return "NAN_OR_INF"
    if len(losses) >= 20 and _mean(losses[-10:]) >= th.not_decreasing * _mean(losses[:10]):
        return "NOT_DECREASING"
    if chance is not None and chance > 0 and len(losses) >= th.min_losses \
            and _mean(losses[-10:]) >= th.chance_share * chance:
        return "NOT_DECREASING"
    recent = losses[-10:]
    if len(recent) >= 5:
        changes, amplitude, net = oscillation(recent, max(abs(v) for v in losses[:10]))
        first, last = _quarters(losses)
        progress = 1 - last / first if first > 0 else 0.0
        if changes >= th.oscillation_sign_changes and amplitude >= th.oscillation_amplitude \
                and net < 0.5 and progress < th.oscillation_progress:
            return "OSCILLATING"
    return "HEALTHY"


def tail_trend(losses: list[float], n: int = 5) -> str:
    """Which way the last `n` losses go, in words: "falls", "rises", "is flat" (within 1% of
    its level: five equal losses are flat, whatever the verdict on the whole curve) or, with
    NaN/Inf or fewer than 4 losses, "cannot be read"."""
    tail = losses[-n:]
    if len(tail) < 4 or not all(math.isfinite(v) for v in tail):
        return "cannot be read"
    half = len(tail) // 2
    before, after = _mean(tail[:half]), _mean(tail[-half:])
    level = max(abs(before), abs(after), 1e-12)
    if abs(after - before) <= 0.01 * level:
        return "is flat"
    return "falls" if after < before else "rises"


# -- helpers over records ------------------------------------------------------------------------
def _weight_params(rec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(n, p) for n, p in rec["params"].items() if p.get("ndim", 2) >= 2]


def _median_update_ratio(rec: dict[str, Any]) -> float | None:
    ratios = [p["update_ratio"] for _, p in _weight_params(rec) if _finite(p["update_ratio"])]
    return statistics.median(ratios) if ratios else None


def _total_norm(rec: dict[str, Any], key: str) -> float | None:
    vals = [p[key] for p in rec["params"].values() if p.get(key) is not None]
    if not vals:
        return None
    return math.sqrt(sum(v * v for v in vals))


def _recent_layers(ev: Evidence, th: Thresholds, full: bool = False) -> list[dict[str, Any]]:
    """The last `recent_records` records with activation statistics (`full`: full records
    only, the ones with sample_std and the other statistics taken on some steps only)."""
    recs = [r for r in ev.history if r["layers"] and (not full or r.get("full", True))]
    return recs[-th.recent_records:]


def _first_step(ev: Evidence, test: Callable[[dict[str, Any]], bool]) -> int | None:
    for rec in ev.history:
        if test(rec):
            return rec["step"]
    return None


def _rms(s: dict[str, Any]) -> float:
    return math.sqrt(s["act_std"] ** 2 + s["act_mean"] ** 2)


# -- rules ---------------------------------------------------------------------------------------
def rule_nonfinite(ev: Evidence, th: Thresholds) -> list[Finding]:
    bad_loss = next((i for i, v in enumerate(ev.losses) if not math.isfinite(v)), None)
    first_rec, layer, params = None, None, []
    for rec in ev.history:
        layers = [n for n, s in rec["layers"].items() if s["nonfinite"]]
        params = [n for n, p in rec["params"].items() if p.get("nonfinite_grad")]
        if layers or params:
            first_rec, layer = rec, (layers[0] if layers else None)
            break
    bad_val = next((i for i, v in enumerate(ev.val_losses) if not math.isfinite(v)), None)
    if bad_loss is None and first_rec is None:
        if bad_val is None:
            return []
        return [Finding("NAN_OR_INF", f"validation loss is NaN/Inf from evaluation {bad_val} "
                        f"(the training loss stayed finite: look at the evaluation pass)",
                        evidence={"first_nonfinite_val_index": bad_val,
                                  "val_loss": ev.val_losses[bad_val]})]
    evidence: dict[str, Any] = {"first_nonfinite_loss_index": bad_loss,
                                "first_nonfinite_val_index": bad_val}
    if bad_loss is not None:
        evidence["last_finite_loss"] = next((v for v in reversed(ev.losses[:bad_loss])), None)
    if first_rec is not None:
        evidence |= {"first_nonfinite_record_step": first_rec["step"],
                     "first_nonfinite_layer": layer, "nonfinite_grad_params": params[:10]}
    where = f"first in layer {layer!r} (forward order)" if layer else (
        "in the loss" if bad_loss is not None else "in the gradients")
    msg = (f"non-finite values {where}"
           + (f"; loss is NaN/Inf from record {bad_loss}" if bad_loss is not None else ""))
    step = first_rec["step"] if first_rec is not None else None
    return [Finding("NAN_OR_INF", msg, layer=layer, evidence=evidence, step=step)]


def rule_lr_too_high(ev: Evidence, th: Thresholds) -> list[Finding]:
    ratios = [(r["step"], m) for r in ev.history if (m := _median_update_ratio(r)) is not None]
    top = max((m for _, m in ratios), default=None)
    finite = []
    for v in ev.losses:
        if not math.isfinite(v):
            break
        finite.append(v)
    went_nonfinite = len(finite) < len(ev.losses) and len(finite) >= 1
    reasons = []
    progress = False
    if len(finite) >= th.min_losses:
        first_q, last_q = _quarters(finite)
        progress = 0 <= last_q < th.lr_high_progress * first_q
    if top is not None and top >= th.lr_high_update_ratio and not progress:
        reasons.append(f"updates move weights by {top:.2g}x their norm in one step")
    blew_up = len(finite) >= 2 and max(finite) > th.loss_blowup * abs(finite[0]) > 0
    rising = oscillating = False
    if len(finite) >= th.min_losses:
        rising = last_q > th.loss_rise * first_q and not _val_improved(ev.val_losses, th)
        window = finite[-max(th.min_losses, len(finite) // 2):]
        changes, amplitude, net = oscillation(window, abs(finite[0]))
        oscillating = (changes >= th.oscillation_sign_changes
                       and amplitude >= th.lr_oscillation_amplitude and last_q >= 0.95 * first_q)
    ratio_ok = top is None or top >= th.lr_high_ratio_with_bad_loss
    if ratio_ok and (blew_up or rising or oscillating):
        reasons.append("the loss " + ("blew up" if blew_up else "rises" if rising
                                      else "oscillates without progress"))
    converged_then_nan = (len(finite) >= 3 and finite[-1] <= min(finite)
                          and 0 <= finite[-1] < th.lr_high_progress * finite[0])
    if went_nonfinite and top is not None and top >= th.lr_high_ratio_with_bad_loss \
            and not converged_then_nan:
        reasons.append("the loss became NaN/Inf")
    if not reasons:
        return []
    step = next((s for s, m in ratios if m >= th.lr_high_ratio_with_bad_loss), None)
    first_ratio = ratios[0][1] if ratios else None     # before the blow-up grew the weights
    evidence = {"max_update_ratio": _sig(top) if top is not None else None,
                "first_update_ratio": _sig(first_ratio) if first_ratio is not None else None,
                "loss_first": finite[0] if finite else None,
                "loss_max": max(finite) if finite else None,
                "loss_last": ev.losses[-1] if ev.losses else None,
                "lr": ev.lrs[-1][1] if ev.lrs else None}
    return [Finding("LR_TOO_HIGH", "; ".join(reasons), evidence=evidence, step=step,
                    advice=_rate_advice("lower", first_ratio, th))]


def _val_improved(vals: list[float], th: Thresholds) -> bool:
    """Did the recorded validation loss end at most `rise_val_progress` of where it began?"""
    return len(vals) >= 2 and all(math.isfinite(v) for v in vals) and vals[0] > 0 \
        and vals[-1] <= th.rise_val_progress * vals[0]


def rule_lr_too_low(ev: Evidence, th: Thresholds) -> list[Finding]:
    losses = ev.losses
    if len(losses) < 2 * th.min_losses or not all(math.isfinite(v) for v in losses):
        return []
    first_q, last_q = _quarters(losses)
    if first_q <= 1e-6:
        return []
    change = (first_q - last_q) / abs(first_q)
    recs = ev.history[1:] or ev.history
    ratios = [m for r in recs if (m := _median_update_ratio(r)) is not None]
    grad_ratios = [p["grad_norm"] / p["weight_norm"] for r in recs for _, p in _weight_params(r)
                   if _finite(p["grad_norm"]) and _finite(p["weight_norm"]) and p["weight_norm"] > 0]
    if not ratios or not grad_ratios:
        return []
    ratio, grad_ratio = statistics.median(ratios), statistics.median(grad_ratios)
    if abs(change) < th.lr_low_loss_change and ratio < th.lr_low_update_ratio \
            and grad_ratio > th.lr_low_grad_ratio:
        return [Finding("LR_TOO_LOW",
                        f"loss changed {change:.1%} over {len(losses)} steps; updates are "
                        f"{ratio:.1e} of the weights while gradients are {grad_ratio:.1e}",
                        evidence={"loss_change": change, "median_update_ratio": _sig(ratio),
                                  "median_grad_to_weight": _sig(grad_ratio),
                                  "lr": ev.lrs[-1][1] if ev.lrs else None},
                        advice=_held_down(ev) + _rate_advice("raise", ratio, th))]
    return []


def rule_lr_decayed(ev: Evidence, th: Thresholds) -> list[Finding]:
    if not ev.lrs:
        return []
    peak_step, peak = max(ev.lrs, key=lambda sl: sl[1])
    if peak <= 0:
        return []
    collapsed = next((s for s, lr in ev.lrs if s >= peak_step and lr <= th.lr_decay_factor * peak),
                     None)
    if collapsed is None or ev.lrs[-1][1] > th.lr_decay_factor * peak:
        return []
    spent = ev.steps - collapsed
    if spent < max(th.lr_decay_min_steps, th.lr_decay_min_share * ev.steps):
        return []
    return [Finding("LR_DECAYED",
                    f"learning rate fell from {peak:.2g} to {ev.lrs[-1][1]:.2g} by step "
                    f"{collapsed} and stayed there for {spent} of {ev.steps} steps",
                    evidence={"peak_lr": peak, "final_lr": ev.lrs[-1][1],
                              "collapsed_at_step": collapsed, "steps_collapsed": spent},
                    step=collapsed)]


def rule_dead_neurons(ev: Evidence, th: Thresholds) -> list[Finding]:
    recs = _recent_layers(ev, th)
    out = []
    for name in ev.layer_order:
        seen = [r["layers"][name] for r in recs if name in r["layers"]]
        seen = [s for s in seen if s["dead_fraction"] is not None
                and s.get("samples", th.dead_min_samples) >= th.dead_min_samples]
        if not seen or not all(s["dead_fraction"] >= th.dead_fraction for s in seen):
            continue
        dead = seen[-1]["dead_fraction"]
        step = _first_step(ev, lambda r: (r["layers"].get(name) or {}).get("dead_fraction") is not
                           None and r["layers"][name]["dead_fraction"] >= th.dead_fraction)
        first = next((r["layers"][name] for r in ev.history if name in r.get("layers", {})
                      and r["layers"][name].get("dead_fraction") is not None), None)
        from_start = first is not None and first["dead_fraction"] >= th.dead_fraction
        out.append(Finding("DEAD_NEURONS",
                           f"{dead:.0%} of the units output 0 for every sample of the batch",
                           layer=name, evidence={"dead_fraction": dead,
                                                 "zero_fraction": next(
                                                     (s["zero_fraction"] for s in reversed(seen)
                                                      if s["zero_fraction"] is not None), None),
                                                 "samples": seen[-1].get("samples"),
                                                 "dead_from_start": from_start},
                           step=step,
                           advice="The units are dead from the first step: the initialisation "
                                  "puts their input below 0 for every sample. Re-initialise "
                                  "the layers feeding them (Kaiming, or PyTorch's default init)."
                           if from_start else
                           "The units died during training, after steps too large: lower the "
                           "learning rate, or use LeakyReLU/GELU, which keep a gradient."))
    return out


def rule_activation_scale(ev: Evidence, th: Thresholds) -> list[Finding]:
    """COLLAPSED_ACTIVATIONS (first collapsed layer) and EXPLODING_ACTIVATIONS."""
    recs = _recent_layers(ev, th)
    if not recs:
        return []
    full_recs = _recent_layers(ev, th, full=True)
    first_layers = next(r for r in ev.history if r["layers"])["layers"]
    out: list[Finding] = []
    collapsed, upstream_dead = [], False
    exploding: list[tuple[str, float, float]] = []
    # A classifier that fits its data drives its logits up on purpose (cross-entropy rewards
    # margins), so growth alone never indicts the output layer; its absolute scale still can.
    output_layer = ev.layer_order[-1] if ev.layer_order else None
    for name in ev.layer_order:
        seen = [r["layers"][name] for r in recs if name in r["layers"]]
        if not seen:
            continue
        last = seen[-1]
        if not all(math.isfinite(_rms(s)) for s in seen):
            # a blow-up that ended in NaN/Inf: its size is read from the last finite record
            before = _last_finite(ev, name)
            if before is not None and _explodes(name, before, first_layers, th, output_layer):
                exploding.append((name, _rms(before), _growth(name, before, first_layers)))
            continue
        if last["dead_fraction"] is not None and last["dead_fraction"] >= 0.999:
            upstream_dead = True
            continue

        def is_collapsed(s: dict[str, Any]) -> bool:
            scale = max(s["act_std"], abs(s["act_mean"]))
            return (s.get("samples", 2) >= 2 and scale > 1e-12
                    and s["sample_std"] <= th.collapse_ratio * scale)
        judged = [r["layers"][name] for r in full_recs if name in r["layers"]
                  and r["layers"][name]["sample_std"] is not None]
        if not upstream_dead and judged and all(is_collapsed(s) for s in judged):
            collapsed.append((name, judged[-1]))
        if _explodes(name, last, first_layers, th, output_layer):
            exploding.append((name, _rms(last), _growth(name, last, first_layers)))
    if collapsed:
        first, s = collapsed[0]
        one_unit_softmax = (s.get("kind", "").lower() == "softmax" and s["act_mean"] == 1.0
                            and s["act_std"] == 0.0)
        out.append(Finding("COLLAPSED_ACTIVATIONS",
                           f"output varies across the batch by {s['sample_std']:.1e} "
                           f"against a scale of {max(s['act_std'], abs(s['act_mean'])):.1e}",
                           layer=first,
                           evidence={"sample_std": s["sample_std"], "act_std": s["act_std"],
                                     "act_mean": s["act_mean"],
                                     "collapsed_layers": [n for n, _ in collapsed]},
                           step=recs[0]["step"],
                           advice="A softmax over a single unit outputs exactly 1 whatever its "
                                  "input: use a sigmoid on one output unit (softmax needs two "
                                  "or more)." if one_unit_softmax else ""))
    if exploding:
        name, rms, growth = exploding[0]
        big, scale = _largest_init(ev)
        out.append(Finding("EXPLODING_ACTIVATIONS",
                           f"activation rms {rms:.2g} ({_change(growth)} since the first record)",
                           layer=name,
                           evidence={"rms": _sig(rms), "growth": _sig(growth),
                                     "layers": [n for n, _, _ in exploding],
                                     "largest_weight": big, "weight_scale": _sig(scale)},
                           # weights that start too large explode the activations before
                           # any update acts: from the start (a rate too high can only follow)
                           step=None if _too_large_init(ev, th, big, scale)[0] else
                           _first_exploding(ev, [n for n, _, _ in exploding], th,
                                            output_layer),
                           advice=_exploding_advice(ev, th, big, scale, growth)))
    return out


def _growth(name: str, s: dict[str, Any], first_layers: dict[str, Any]) -> float:
    """How many times the layer's rms in `s` is its rms at the first record."""
    start = _rms(first_layers[name]) if name in first_layers else _rms(s)
    return _rms(s) / start if start > 0 else 1.0


def _explodes(name: str, s: dict[str, Any], first_layers: dict[str, Any], th: Thresholds,
              output_layer: str | None) -> bool:
    """Is the layer's output in `s` exploding: an rms above `exploding_activation_rms`, or
    grown `activation_growth` times since the first record (never the output layer's growth:
    a classifier that fits drives its logits up on purpose)?"""
    rms = _rms(s)
    grew = (_growth(name, s, first_layers) >= th.activation_growth and rms > 10
            and name != output_layer)
    return rms >= th.exploding_activation_rms or grew


def _last_finite(ev: Evidence, name: str) -> dict[str, Any] | None:
    """The layer's statistics at the last record where they were finite."""
    return next((r["layers"][name] for r in reversed(ev.history)
                 if name in r.get("layers", {}) and math.isfinite(_rms(r["layers"][name]))),
                None)


def _first_exploding(ev: Evidence, names: list[str], th: Thresholds,
                     output_layer: str | None) -> int | None:
    """The step of the first record where one of `names` was exploding; None when that is the
    first record with activations: measured in the first forward pass, before any update
    could act, so from the start (a rate too high can only follow it)."""
    recs = [r for r in ev.history if r.get("layers")]
    first_layers = recs[0]["layers"] if recs else {}
    for i, rec in enumerate(recs):
        if any(n in rec["layers"] and math.isfinite(_rms(rec["layers"][n]))
               and _explodes(n, rec["layers"][n], first_layers, th, output_layer)
               for n in names):
            return None if i == 0 else rec["step"]
    return recs[-1]["step"] if recs else None


def _init_scales(ev: Evidence) -> dict[str, float]:
    """Each weight's (2-D or more, embeddings aside) first recorded rms times sqrt(fan_in):
    sqrt(2) for Kaiming's ReLU init, 0.58 for PyTorch's default, an orthogonal matrix's gain."""
    rec = next((r for r in ev.history if r.get("params")), None)
    out = {}
    for n, p in (rec["params"].items() if rec else []):
        fan_in, numel, norm = p.get("fan_in"), p.get("numel"), p.get("weight_norm")
        if ev.layer_kinds.get(p.get("layer", layer_of(n)), "").startswith("Embedding"):
            continue           # a lookup table (N(0, 1) by default): it multiplies no input
        if p.get("ndim", 0) >= 2 and fan_in and numel and _finite(norm):
            out[n] = norm / math.sqrt(numel) * math.sqrt(fan_in)
    return out


def _largest_init(ev: Evidence) -> tuple[str | None, float]:
    """The weight whose initial scale (`_init_scales`) is largest, and that scale."""
    scales = _init_scales(ev)
    big = max(scales, key=scales.get, default=None)
    return big, scales.get(big, 0.0) if big is not None else 0.0


def _too_large_init(ev: Evidence, th: Thresholds, big: str | None,
                    scale: float) -> tuple[str | None, float]:
    """The weight that starts too large (a recurrent matrix that stretches the state first,
    else the largest, `big` at `scale`), and its scale; (None, 0.0) when none does."""
    recurrent = {n: v for n, v in _init_scales(ev).items() if "weight_hh" in n}
    if recurrent and max(recurrent.values()) >= th.init_scale:   # the state's own stretch
        big = max(recurrent, key=recurrent.get)
        scale = recurrent[big]
    return (big, scale) if big is not None and scale >= th.init_scale else (None, 0.0)


def _exploding_advice(ev: Evidence, th: Thresholds, big: str | None, scale: float,
                      growth: float) -> str:
    """What to change for activations that explode: the weight that starts too large, or,
    with weights at a variance-preserving scale, what adds up inside the network."""
    big, scale = _too_large_init(ev, th, big, scale)
    if big is not None:
        if "weight_hh" in big:
            return (f"The recurrent weights {big} stretch the state about {scale:.2g}x per time "
                    "step from the start: re-initialise them orthogonally with a gain of at "
                    "most 1 (or keep PyTorch's default init).")
        kinds = {s.get("kind", "") for r in ev.history for s in r.get("layers", {}).values()}
        saturating = bool(kinds & {"Sigmoid", "Tanh"}) and not kinds & {"ReLU", "LeakyReLU"}
        init, unit = ("Xavier", 1.0) if saturating else ("Kaiming", math.sqrt(2))
        scales = _init_scales(ev)
        large = [n for n, v in scales.items() if v >= th.init_scale]
        return (f"The weights start too large: {len(large)} of {len(scales)} weight matrices "
                f"start {min(scales[n] for n in large) / unit:.2g}x to {scale / unit:.2g}x the "
                f"scale of {init}'s init (largest: {big}). Initialise them with {init}.")
    idle_norms = [n for n in never_run(ev) if ev.layer_kinds.get(n, "").endswith(_NORMS)]
    if growth < th.activation_growth and idle_norms:
        return ("The activations are this large from the first step although the weights start "
                "at a variance-preserving scale, and the network builds normalisation layers "
                f"that never run ({_names(idle_norms)}): call them in forward, on the input of "
                "what adds up (in a residual block, x + f(norm(x))).")
    if growth < th.activation_growth:
        return ("The activations are this large from the first step although the weights start "
                "at a variance-preserving scale: what adds up inside the network needs "
                "normalisation (in a residual stack, normalise inside each block: pre-norm).")
    return ("The activations grew during training: lower the learning rate, and normalise "
            "inside the network (LayerNorm/BatchNorm).")


def _ordered_weights(ev: Evidence, rec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    order = {name: i for i, name in enumerate(ev.layer_order)}
    ws = [(n, p) for n, p in _weight_params(rec)
          if _finite(p["grad_norm"]) and _finite(p["weight_norm"]) and p["weight_norm"] > 0]
    return sorted(ws, key=lambda np_: order.get(np_[1].get("layer"), len(order)))


def rule_vanishing(ev: Evidence, th: Thresholds) -> list[Finding]:
    finite = [v for v in ev.losses if math.isfinite(v)]
    if len(finite) == len(ev.losses) >= th.min_losses:
        first_q, last_q = _quarters(finite)
        if first_q > 0 and last_q < th.vanishing_learned_fall * first_q:
            return []
    ratios, detail = [], None
    for rec in ev.history[-th.recent_records:]:
        ws = _ordered_weights(ev, rec)
        if len(ws) < th.vanishing_min_layers:
            continue
        (first, pf), (last, pl) = ws[0], ws[-1]
        rel_first = pf["grad_norm"] / pf["weight_norm"]
        rel_last = pl["grad_norm"] / pl["weight_norm"]
        if rel_last <= 0:
            continue
        # An early layer whose gradient is many times its weights is not starving, whatever
        # the last layer reads: a network that blew up (the explosion's own rule names it).
        ratios.append(math.inf if rel_first >= th.exploding_grad_to_weight
                      else rel_first / rel_last)
        detail = (first, last, rel_first, rel_last)
    if not ratios or detail is None or max(ratios) >= th.vanishing_ratio:
        return []
    first, last, rel_first, rel_last = detail
    kinds = {s.get("kind", "") for r in ev.history for s in r.get("layers", {}).values()}
    saturating = kinds & {"Sigmoid", "Tanh"}
    advice = ("Use ReLU with Kaiming initialisation instead of the "
              f"{'/'.join(sorted(k.lower() for k in saturating))} activations, or add residual "
              "connections." if saturating else "")
    return [Finding("VANISHING_GRADIENT",
                    f"relative gradient of {first} is {rel_first / rel_last:.1e} of {last}'s",
                    layer=ev.layer_order[0] if ev.layer_order else first,
                    evidence={"first_param": first, "last_param": last,
                              "first_grad_to_weight": _sig(rel_first),
                              "last_grad_to_weight": _sig(rel_last),
                              "ratio": _sig(rel_first / rel_last)},
                    step=ev.history[-1]["step"], advice=advice)]


def rule_exploding_gradient(ev: Evidence, th: Thresholds) -> list[Finding]:
    norms = []
    for rec in ev.history:
        g, w = _total_norm(rec, "grad_norm"), _total_norm(rec, "weight_norm")
        if g is not None:
            # The gradient's size is judged against the weights only while some weight matrix
            # has one: all matrices exactly 0 (a zero initialisation, which no gradient leaves)
            # leave a few biases as the "scale", and any gradient is then 10x it.
            matrices = math.sqrt(sum(p["weight_norm"] ** 2 for _, p in _weight_params(rec)
                                     if _finite(p.get("weight_norm"))))
            norms.append((rec["step"], g, w if matrices > 0 else None))
    finite = [(s, g, w) for s, g, w in norms if math.isfinite(g)]
    if not finite:
        return []
    first_g = finite[0][1]

    def exploding(g: float, w: float | None) -> bool:
        if not math.isfinite(g):
            return True
        return (g >= th.exploding_grad_norm
                or (w is not None and w > 0 and g / w >= th.exploding_grad_to_weight)
                or (first_g > 0 and g / first_g >= th.grad_growth
                    and w is not None and g / w >= 1.0))
    bad = [(s, g, w) for s, g, w in norms if exploding(g, w)]
    if not bad:
        return []
    early = sorted(g for _, g, _ in finite[:max(1, len(finite) // 4)])
    calm = th.clip_calm_factor * early[len(early) // 2]
    healthy = [g for s, g, w in finite if s < bad[0][0] and not exploding(g, w) and g <= calm]
    if healthy:
        healthy.sort()
        k = min(len(healthy) - 1, int(round(th.clip_percentile / 100 * (len(healthy) - 1))))
        clip = _sig(healthy[k])
    else:
        clip = 1.0
    worst = max((g for _, g, _ in bad if math.isfinite(g)), default=float("inf"))
    return [Finding("EXPLODING_GRADIENT",
                    f"total gradient norm reached {worst:.2g} (first record: {first_g:.2g}); "
                    f"clip at about {clip}",
                    evidence={"max_grad_norm": _sig(worst), "first_grad_norm": _sig(first_g),
                              "suggested_clip": clip, "healthy_steps": len(healthy),
                              "first_step": bad[0][0]},
                    advice="Fix what makes the gradient grow: the finding this one follows "
                           "from, if the report shows one (a rate too high, weights that start "
                           "too large). Clipping, torch.nn.utils.clip_grad_norm_(model."
                           f"parameters(), max_norm={clip}) before optimizer.step(), caps the "
                           "gradient as a safety net; it removes no cause.",
                    step=bad[0][0])]


def rule_missing_zero_grad(ev: Evidence, th: Thresholds) -> list[Finding]:
    ratios, step = [], None
    for rec in ev.history:
        for p in rec["params"].values():
            stale, g = p.get("stale_grad_norm"), p.get("grad_norm")
            if stale is None or not _finite(g) or g <= 0:
                continue
            ratios.append(stale / g)
            if step is None and stale / g > th.stale_grad_ratio:
                step = rec["step"]
    stale_share = sum(r > th.stale_grad_ratio for r in ratios) / len(ratios) if ratios else 0.0
    if len(ratios) < th.min_events or stale_share < th.stale_share:
        return []
    return [Finding("MISSING_ZERO_GRAD",
                    f".grad still held the previous steps' gradients at the next backward "
                    f"({stale_share:.0%} of checks; typical leftover {statistics.median(ratios):.2f}x "
                    f"the step's gradient)",
                    evidence={"stale_share": stale_share,
                              "median_stale_to_grad": _sig(statistics.median(ratios)),
                              "checks": len(ratios)}, step=step)]


def rule_params_not_updated(ev: Evidence, th: Thresholds) -> list[Finding]:
    names = {n: c for n, c in ev.unstepped.items() if c >= th.min_events}
    frozen: dict[str, int] = {}
    for rec in ev.history:
        if not rec.get("lr"):
            continue
        for n, p in rec["params"].items():
            if _finite(p.get("grad_norm")) and _finite(p.get("weight_norm")) \
                    and p["grad_norm"] > th.not_updated_grad_ratio * p["weight_norm"] \
                    and p.get("update_norm") == 0.0:
                frozen[n] = frozen.get(n, 0) + 1
    names |= {n: c for n, c in frozen.items() if c >= th.min_events}
    if not names:
        return []
    first = next(iter(names))
    return [Finding("PARAMS_NOT_UPDATED",
                    f"{len(names)} tensor(s) received gradients that no optimizer step applied "
                    f"(e.g. {first})",
                    layer=layer_of(first) or None if not first.startswith("unreg")
                    else None,
                    evidence={"tensors": dict(list(names.items())[:20])})]


def rule_no_gradient(ev: Evidence, th: Thresholds) -> list[Finding]:
    if not ev.never_grad or (ev.backwards == 0 and ev.optimizer_steps == 0):
        return []
    first = ev.never_grad[0]
    idle = never_run(ev)
    return [Finding("NO_GRADIENT",
                    f"{len(ev.never_grad)} trainable tensor(s) never received a gradient after "
                    f"{max(ev.backwards, ev.optimizer_steps)} backward passes (e.g. {first})",
                    layer=layer_of(first) or None,
                    evidence={"params": ev.never_grad[:20], "backwards": ev.backwards,
                              "never_run": idle[:20]},
                    advice=f"They belong to layers that never ran in forward ({_names(idle)}): "
                           "built in __init__, never called. Call each where it belongs in "
                           "forward, or remove it." if idle else "")]


#: layer kinds that normalise (by class name: BatchNorm1d, LayerNorm, GroupNorm, RMSNorm, ...)
_NORMS = ("Norm", "Norm1d", "Norm2d", "Norm3d")


def never_run(ev: Evidence) -> list[str]:
    """The layers holding a tensor that never got a gradient which the debugger watched but
    never saw run forward (a layer built in __init__ and never called), in model order."""
    ran = {name.partition("#")[0] for name in ev.layer_order}
    owners = dict.fromkeys(layer_of(p) for p in ev.never_grad)
    return [n for n in owners if n in ev.layer_kinds and n not in ran]


def _names(layers: list[str], most: int = 3) -> str:
    """A few layer names, and how many more ("1.norm, 2.norm, 3.norm and 27 more")."""
    shown = ", ".join(layers[:most])
    return shown + (f" and {len(layers) - most} more" if len(layers) > most else "")


def rule_modes(ev: Evidence, th: Thresholds) -> list[Finding]:
    out = []
    em = ev.eval_mode_training
    if em is not None and em.count >= th.min_events and ev.backwards > 0 \
            and em.count / ev.backwards >= th.mode_share:
        out.append(Finding("EVAL_MODE_DURING_TRAINING",
                           f"{em.count} of {ev.backwards} training passes ran with "
                           f"{', '.join(em.modules[:3])} in eval mode",
                           layer=em.modules[0], evidence={"passes": em.count,
                                                          "training_passes": ev.backwards,
                                                          "modules": em.modules[:10]},
                           step=em.first_step))
    tm = ev.train_mode_eval
    if tm is not None and tm.count >= th.min_events:
        out.append(Finding("TRAIN_MODE_DURING_EVAL",
                           f"{tm.count} evaluation passes (no backward) ran with "
                           f"{', '.join(tm.modules[:3])} in training mode",
                           layer=tm.modules[0], evidence={"passes": tm.count,
                                                          "modules": tm.modules[:10]},
                           step=tm.first_step))
    se = ev.stochastic_eval
    if (tm is None or tm.count < th.min_events) and se is not None \
            and se.differed >= th.min_events and se.differed == se.probes:
        out.append(Finding("TRAIN_MODE_DURING_EVAL",
                           f"{se.differed} of {se.probes} evaluation passes (eval mode or no "
                           "gradients) gave a different output when run twice on the same "
                           "inputs: a random op is active at evaluation whatever the module "
                           "mode (F.dropout(x, training=True), F.dropout(x) without "
                           "training=self.training, or another random call in forward)",
                           evidence={"probes": se.probes, "differed": se.differed,
                                     "max_relative_diff": _sig(se.max_relative_diff)},
                           advice="Pass training=self.training to functional dropout (or use "
                                  "an nn.Dropout module), so model.eval() turns it off.",
                           step=se.first_step))
    return out


def rule_symmetric(ev: Evidence, th: Thresholds) -> list[Finding]:
    out = []
    for name, s in ev.symmetric.items():
        if s["row_spread"] <= th.symmetric_spread * max(s["weight_scale"], 1e-30):
            out.append(Finding("SYMMETRIC_WEIGHTS",
                               f"all {s['units']} rows of the weight are identical "
                               f"(largest difference {s['row_spread']:.1e})",
                               layer=name, evidence=dict(s)))
    return out


def overfit_rise(vals: list[float], th: Thresholds) -> dict[str, Any] | None:
    """The validation-loss rise that counts as overfitting (see the overfit_* thresholds), as
    evidence; None when the rise is absent, too small or not sustained."""
    if len(vals) < th.overfit_after_best + 2 or not all(math.isfinite(v) for v in vals):
        return None
    best = min(range(len(vals)), key=vals.__getitem__)
    if len(vals) - 1 - best < max(th.overfit_after_best, th.overfit_sustained):
        return None
    gained = vals[0] - vals[best]
    floor = max(vals[best] * (1 + th.overfit_rise), vals[best] + th.overfit_min_rise,
                vals[best] + th.overfit_give_back * gained)
    last = vals[-th.overfit_sustained:]
    if min(last) < floor:
        return None
    return {"best_val_index": best, "best_val_loss": vals[best], "last_val_loss": vals[-1],
            "rise": vals[-1] - vals[best], "relative_rise": vals[-1] / vals[best] - 1
            if vals[best] > 0 else math.inf, "rise_floor": floor, "sustained_points": len(last)}


def rule_overfitting(ev: Evidence, th: Thresholds) -> list[Finding]:
    vals = ev.val_losses
    rise = overfit_rise(vals, th)
    if rise is None:
        return []
    best = rise["best_val_index"]
    losses = ev.losses

    def train_at(k: int) -> float | None:
        n = ev.val_at[k]
        window = [v for v in losses[max(0, n - 5):n] if math.isfinite(v)]
        return _mean(window) if window else None
    t_best, t_last = train_at(best), train_at(len(vals) - 1)
    if t_best is None or t_last is None or t_last >= t_best:
        return []
    return [Finding("OVERFITTING",
                    f"validation loss rose from {vals[best]:.3g} (evaluation {best}) to "
                    f"{vals[-1]:.3g} (+{rise['rise']:.2g}, {rise['relative_rise']:.0%}; the last "
                    f"{rise['sustained_points']} evaluations all above {rise['rise_floor']:.3g}) "
                    f"while training loss fell from {t_best:.3g} to {t_last:.3g}",
                    evidence=rise | {"train_loss_at_best": t_best, "train_loss_last": t_last},
                    advice=f"Stop at the best validation loss (evaluation {best} of {len(vals)}: "
                           "stop once it rises), add weight decay, or train on more data.")]


# -- loop faults seen through the gradient bookkeeping (issue 16) -----------------------------
def rule_zero_grad_in_accumulation(ev: Evidence, th: Thresholds) -> list[Finding]:
    cleared, steps = ev.cleared_steps, ev.accumulating_steps
    if len(cleared) < th.min_events or steps == 0 or len(cleared) / steps < th.cleared_share:
        return []
    return [Finding("ZERO_GRAD_IN_ACCUMULATION",
                    f"in {len(cleared)} of {steps} optimizer steps with several backward "
                    f"passes, the gradients were cleared between two passes: each step used "
                    f"the last micro-batch only",
                    evidence={"cleared_steps": len(cleared), "accumulating_steps": steps,
                              "first_steps": cleared[:5]}, step=cleared[0])]


def rule_frozen_params_move(ev: Evidence, th: Thresholds) -> list[Finding]:
    moved = {n: v for n, v in ev.moved_without_grad.items()
             if v[0] >= th.frozen_move_events and v[1] > th.frozen_move_ratio}
    if not moved:
        return []
    names = sorted(moved)
    return [Finding("FROZEN_PARAMS_MOVE",
                    f"{len(names)} parameter tensor(s) without a gradient moved at the optimizer "
                    f"step ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''}), by up to "
                    f"{_sig(max(v[1] for v in moved.values()))} of their norm",
                    layer=layer_of(names[0]) or None,
                    evidence={"params": names[:10],
                              "steps_moved": {n: moved[n][0] for n in names[:10]},
                              "max_relative_move": max(v[1] for v in moved.values())})]


def rule_warmup_missing(ev: Evidence, th: Thresholds) -> list[Finding]:
    """A transformer trained at its full learning rate from step 0 that blows up in its first
    steps, or that its first, large updates leave stalled at the marginal entropy of its
    targets (see the warmup_* thresholds)."""
    if not ev.transformer or ev.post_ln is False or not ev.lrs or not ev.losses:
        return []
    peak = max(lr for _, lr in ev.lrs)
    start = ev.lrs[0][1]
    if peak <= 0 or ev.lrs[0][0] > 0 or start < th.warmup_start_share * peak:
        return []
    window = ev.losses[:max(th.warmup_window, len(ev.losses) // 4)]
    finite = []
    for v in window:
        if not math.isfinite(v):
            break
        finite.append(v)
    if not finite or finite[0] <= 0:
        return []
    evidence = {"lr_at_start": start, "peak_lr": peak, "loss_first": finite[0],
                "loss_max": max(finite), "window": len(window),
                "nonfinite": len(finite) < len(window), "post_ln": ev.post_ln}
    layers = " (post-LN layers)" if ev.post_ln else ""
    blown = _warmup_blowup(window, finite, th)
    if blown is not None:
        what, step = blown
        return [Finding("WARMUP_MISSING",
                        f"the loss {what} in the first {len(window)} steps of a transformer "
                        f"trained at its full learning rate ({start:.2g}) from step 0, without "
                        f"warm-up{layers}", evidence=evidence, step=step)]
    stalled = _warmup_stall(ev, finite, th)
    if stalled is None:
        return []
    level, ratio = stalled
    return [Finding("WARMUP_MISSING",
                    f"the loss stalled at {level:.3g} over steps {3 * len(finite) // 4}-"
                    f"{len(finite) - 1}, {level / ev.marginal_entropy:.0%} of the entropy of "
                    f"the targets' own frequencies ({ev.marginal_entropy:.3g}): the model "
                    "predicts each target at its frequency and ignores its input, after first "
                    f"updates that moved its weights by {ratio:.2g} of their norm, at its full "
                    f"learning rate ({start:.2g}) from step 0, without warm-up{layers}",
                    evidence=evidence | {"stalled_at": round(level, 4),
                                         "marginal_entropy": round(ev.marginal_entropy, 4),
                                         "first_update_ratio": _sig(ratio)},
                    step=0)]


def _warmup_blowup(window: list[float], finite: list[float], th: Thresholds
                   ) -> tuple[str, int | None] | None:
    """(what the loss did, the step it blew up) when it became NaN/Inf, reached
    `warmup_blowup` times its first value, or its last quarter rose `loss_rise` times."""
    nonfinite = len(finite) < len(window)
    peak_loss = max(finite)
    rising = False
    if len(finite) >= th.min_losses:
        first_q, last_q = _quarters(finite)
        rising = last_q > th.loss_rise * first_q
    if not (nonfinite or peak_loss >= th.warmup_blowup * finite[0] or rising):
        return None
    what = ("became NaN/Inf" if nonfinite else f"rose to {peak_loss / finite[0]:.2g}x its "
            f"first value" if peak_loss >= th.warmup_blowup * finite[0] else "rose")
    blown = next((i for i, v in enumerate(window) if not math.isfinite(v)
                  or v >= th.warmup_blowup * finite[0]), None)
    return what, blown


def _warmup_stall(ev: Evidence, finite: list[float], th: Thresholds
                  ) -> tuple[float, float] | None:
    """(the loss's level, the first update/weight ratio) when the window's last quarter sat at
    the marginal entropy of the targets after large first updates (see the thresholds)."""
    if ev.marginal_entropy is None or ev.marginal_entropy <= 0 or len(finite) < th.min_losses:
        return None
    _, level = _quarters(finite)
    if level < th.warmup_stall * ev.marginal_entropy:
        return None
    tail = []
    for v in ev.losses[len(finite) - max(len(finite) // 4, 2):]:
        if not math.isfinite(v):
            break
        tail.append(v)
    early, late = _mean(tail[:len(tail) // 2]), _mean(tail[len(tail) // 2:])
    if late < (1 - th.warmup_stall_fall) * early:
        return None
    first = next((r for r in ev.history if r.get("params")), None)
    ratios = sorted(p["update_ratio"] for p in (first["params"].values() if first else ())
                    if p.get("ndim", 2) >= 2 and _finite(p.get("update_ratio")))
    if not ratios:
        return None
    ratio = statistics.median(ratios)
    return (level, ratio) if ratio >= th.warmup_update_ratio else None


def rule_labels_without_signal(ev: Evidence, th: Thresholds) -> list[Finding]:
    if ev.chance_loss is not None:
        return _no_signal_against_chance(ev, th)
    vals, losses = ev.val_losses, ev.losses
    if len(vals) < th.no_signal_min_val or len(losses) < max(th.min_losses, 4 * th.no_signal_start) \
            or not all(math.isfinite(v) for v in vals + losses):
        return []
    untrained = _mean(losses[:th.no_signal_start])
    _, last_q = _quarters(losses)
    floor = (1 - th.no_signal_val_margin) * max(untrained, vals[0])
    if untrained <= 0 or min(vals) < floor or last_q > th.no_signal_train_fit * untrained:
        return []
    return [Finding("LABELS_SHUFFLED",
                    f"training loss fell from {untrained:.3g} to {last_q:.3g} while the "
                    f"validation loss never went below {min(vals):.3g} (the untrained model's "
                    f"loss, the chance level, is {untrained:.3g}): the labels carry no signal "
                    "the model can carry to new inputs (misaligned or shuffled labels, or "
                    "validation labels indexed differently from training ones)",
                    evidence={"untrained_loss": _sig(untrained), "train_loss_last": _sig(last_q),
                              "best_val_loss": _sig(min(vals)), "first_val_loss": _sig(vals[0]),
                              "val_points": len(vals)},
                    advice=_NO_SIGNAL_ADVICE)]


def _no_signal_against_chance(ev: Evidence, th: Thresholds) -> list[Finding]:
    """LABELS_SHUFFLED for a classifier: its training loss fell well below the chance level
    while no validation loss, however often and from whenever recorded, came below it (see
    the no_signal_chance_* thresholds)."""
    chance, vals, losses = ev.chance_loss, ev.val_losses, ev.losses
    val_chance = ev.val_chance_loss if ev.val_chance_loss is not None else chance
    if not vals or chance is None or min(chance, val_chance) <= 0 \
            or len(losses) < th.min_losses or len(ev.val_at) != len(vals) \
            or not all(math.isfinite(v) for v in vals + losses):
        return []
    if min(vals) < (1 - th.no_signal_chance_margin) * val_chance:
        return []
    train = [_mean(losses[max(0, n - th.no_signal_window):n]) if n > 0 else None
             for n in ev.val_at]
    fitted = [k for k, t in enumerate(train) if t is not None and t <= chance]
    if not fitted or min(train[k] for k in fitted) > th.no_signal_chance_fit * chance:
        return []
    first = vals[fitted[0]]
    if min(vals[fitted[0]:]) < (1 - th.no_signal_follow) * first:
        return []     # the validation loss follows the training loss: other units, not chance
    best_fit = min(train[k] for k in fitted)
    return [Finding("LABELS_SHUFFLED",
                    f"training loss fell to {best_fit:.3g} while every one of {len(vals)} "
                    f"validation losses stayed at or above {min(vals):.3g}, the chance level "
                    f"being {val_chance:.3g} (the loss of predicting the classes' shares): "
                    "the labels carry no signal the model can carry to new inputs (misaligned "
                    "or shuffled labels, or validation labels indexed differently from "
                    "training ones)",
                    evidence={"chance_loss": _sig(chance), "val_chance_loss": _sig(val_chance),
                              "train_loss_fitted": _sig(best_fit),
                              "best_val_loss": _sig(min(vals)), "first_val_loss": _sig(vals[0]),
                              "val_points": len(vals)},
                    advice=_NO_SIGNAL_ADVICE)]


def rule_targets_at_prior(ev: Evidence, th: Thresholds) -> list[Finding]:
    """LABELS_SHUFFLED for token targets that do not follow the inputs: one target per input
    token, none of the relations a language model's targets have with its inputs, and a loss
    that fell to the entropy of the targets' own frequencies and stayed there (see
    `prior_start`, `prior_level`)."""
    entropy, losses = ev.marginal_entropy, ev.losses
    if not ev.targets_unaligned or entropy is None or entropy <= 0 \
            or len(losses) < 4 * th.min_losses or not all(math.isfinite(v) for v in losses):
        return []
    start = _mean(losses[:3])
    q = len(losses) // 4
    before, last = _mean(losses[-2 * q:-q]), _mean(losses[-q:])
    if start < th.prior_start * entropy \
            or not th.prior_level * entropy <= last <= (2 - th.prior_level) * entropy \
            or last < (1 - th.warmup_stall_fall) * before:
        return []
    return [Finding("LABELS_SHUFFLED",
                    f"the loss fell from {start:.3g} to {last:.3g} and stayed there over the "
                    f"last {q} steps, {last / entropy:.0%} of the entropy of the targets' own "
                    f"frequencies ({entropy:.3g}): the model predicts each target at its "
                    "frequency and learns nothing from its inputs. The targets, one per input "
                    "token, are not those tokens shifted by one (nor copies of them): they do "
                    "not follow the inputs (a transpose or reshape that mixes rows, targets "
                    "drawn at other indices than the inputs)",
                    evidence={"loss_start": _sig(start), "loss_last_quarter": _sig(last),
                              "marginal_entropy": _sig(entropy), "steps": len(losses)},
                    advice="Print one row of inputs beside its targets: each target must be "
                           "the token that follows its input, in the same row. Flatten logits "
                           "and targets the same way (logits.reshape(-1, V) with "
                           "targets.reshape(-1), both batch-first).")]


_NO_SIGNAL_ADVICE = ("Check that inputs and labels are indexed and shuffled together (one "
                     "permutation for both) and that every split maps class names to the same "
                     "indices; confirm with check_labels_carry_signal(...).")


#: codes about what reaches the loss: the layer to blame is the one whose output does
OUTPUT_CODES = ("DOUBLE_SOFTMAX", "SOFTMAX_WRONG_DIM", "NLL_WITHOUT_LOG_SOFTMAX",
                "OUTPUT_RANGE_MISMATCH")
#: layers that only reshape or (at evaluation) pass values through: never the output's author
_PASS_THROUGH = ("Flatten", "Unflatten", "Identity", "Dropout", "Dropout1d", "Dropout2d",
                 "Dropout3d", "AlphaDropout")


def output_layer(ev: Evidence) -> str | None:
    """The last layer in forward order that computes values (not a reshape)."""
    for name in reversed(ev.layer_order):
        if ev.layer_kinds.get(name) not in _PASS_THROUGH:
            return name
    return None


def blame_output_layer(found: list[Finding], ev: Evidence) -> list[Finding]:
    """Loss-input findings name the layer whose output reached the loss."""
    layer = output_layer(ev)
    for f in found:
        if f.code in OUTPUT_CODES and f.layer is None and layer is not None:
            f.layer = layer
            f.evidence.setdefault("output_layer", layer)
    return found


RULES: list[Callable[[Evidence, Thresholds], list[Finding]]] = [
    rule_nonfinite, rule_lr_too_high, rule_lr_too_low, rule_lr_decayed, rule_dead_neurons,
    rule_activation_scale, rule_vanishing, rule_exploding_gradient, rule_missing_zero_grad,
    rule_params_not_updated, rule_no_gradient, rule_modes, rule_symmetric, rule_overfitting,
    rule_zero_grad_in_accumulation, rule_frozen_params_move, rule_labels_without_signal,
    rule_warmup_missing, rule_targets_at_prior,
]


def evaluate(ev: Evidence, th: Thresholds = Thresholds()) -> list[Finding]:
    """Run every rule; drop consequences already explained by a root cause."""
    found = [f for rule in RULES for f in rule(ev, th)]
    codes = {f.code for f in found}
    if "DEAD_NEURONS" in codes:   # zero gradients below dead units are their consequence
        found = [f for f in found if f.code != "VANISHING_GRADIENT"]
    if "LABELS_SHUFFLED" in codes:   # a validation loss that rises is what no signal looks like
        found = [f for f in found if f.code != "OVERFITTING"]
    return found
