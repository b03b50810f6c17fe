"""Which learning rate a range test's sweep suggests, by which rule, and why.

Two rules, because no one rule serves both kinds of task (`benchmarks/bench_lr_finder.py --set
all` measures them against grid searches of trainings of 50 to 2000 steps):

* EDGE, for plain SGD (no momentum) on a classification loss: the sweep's edge of stability
  (where its loss bottomed out), then short trainings from the initial weights at 0.5, 1,
  2, 4, ... times it (PROBE_STEPS each): the largest rate that trains nearly as well as the
  best of them. Without momentum or adaptive steps each step's progress grows with the rate
  as long as the rate is stable, and a classifier's curvature falls as it grows confident
  (the softmax saturates), so the rate that trains best over hundreds of steps sits near the
  edge the sweep saw, or above it: 0.6-2x for ReLU and tanh networks, 6-20x for a sigmoid
  network or a linear softmax, whose output layer alone sets the sweep's edge and recovers
  from it (its logits grow, the softmax saturates). The sweep cannot tell these apart (it
  crosses each rate in one step); 50 steps at a fixed rate can. Without a way to train
  (a sweep read from a file), 0.9 x the edge.
* STEEPEST, for anything else: the rate where the smoothed loss falls fastest, capped at a
  third of the edge (Adam's kind: ADAPTIVE_CAP). Adam and momentum make their best progress
  well below the rate their sweep blows up at; a regression's curvature does not fall as it
  learns, and SGD's noise sets a floor that rises with the rate: their best rates sit in the
  steep part of the fall. A classifier's fall is read in the log of its loss (where it falls
  by the largest factor), a regression's in the loss itself: a cross-entropy's progress is
  relative, each halving as hard as the last, and read in the loss itself its fastest fall
  comes while the loss is still near chance (a tanh network with momentum: 0.21 x the grid's
  best rate over 1000 steps; 0.77 x in log); a regression's log loss falls by orders of
  magnitude at rates far below its best, fitting the targets' offset and scale (17.9 x the
  best rate on targets of ~1000, read in log; 0.76 x in the loss). Where an adaptive
  optimizer's steepest descent lay above its cap, the cap is a guess read off other tasks, so
  short trainings from it down choose (CAPPED_PROBE_STEPS).
* A flat sweep of plain SGD on a classifier (one step at each rate moved nothing) is probed
  too: fixed-rate trainings from above the sweep's end down, longer until one moves the loss.
* A sweep whose loss never went below its first points, whatever the optimizer and the loss
  (PROBED: one step at each rate is too little for the network, or the batches' scatter hides
  the fall: an LSTM regression under Adam), is probed the same way from its last rate down,
  until the probes stop improving: no curve reading can choose where the curve shows nothing.

The kind could not be read from the curve alone: on the benchmark, classifiers whose sweep fell
by 1.9 e-folds wanted the edge and regressions that fell by 2.1 the steepest descent; the
curve gives the edge. `choose_lr` returns the rate, the rule and the reason in words;
`find_learning_rate` prints them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

Probe = Callable[[float, int], float]
"""probe(lr, steps): train `steps` steps at the fixed rate `lr` from the sweep's initial
weights (put back afterwards) and return the final weights' mean loss on the batches every
probe is scored on (inf when a loss was not finite)."""

# -- STEEPEST --------------------------------------------------------------------------------
SUSTAINED_SPIKE = 2
"""A raw loss back above the plateau marks the edge of stability when this many consecutive
steps are: one batch above it can be batch-to-batch scatter (recurrent networks show it at
rates that train well), two in a row is a rate that undid the fall..."""

SPIKE_SCATTER = 10.0
"""...or when one step alone overshoots the plateau by more than this many times (an order of
magnitude) the raw loss's scatter about its local trend during the fall (the median absolute
second difference, which a steady fall leaves at ~0): a jump no batch scatter explains. On
the benchmark's sweeps the single spikes of healthy recurrent networks reach 4x at most."""

FALL_BAND = 0.1
"""The fall into the minimum starts where the loss curve last leaves the plateau's band of
this share of the drop: on a noisy sweep the curve dips below the band by chance long before
the real fall, and a rule reading the first dip measures noise."""

STEEPEST_CAP = 3.0
"""STEEPEST: the suggestion is at most the edge divided by this (the margin the minimum-based
rules keep: fastai's lr_min = minimum / 10 is a wider one)."""

ADAPTIVE_CAP = 4.5
"""...and at most the edge divided by this for an adaptive optimizer (Adam's kind): its steps
are about the rate in every coordinate from the first one, so the sweep's edge is where one
such step undoes the fit, and over a training its noise floor rises with the rate. On the
benchmark's Adam classifiers the grid's best rate sat at 0.085-0.59 x the sweep's edge
(median 0.18), where a third of the edge was 0.57-3.9 x the best; 1/4.5 puts them at
0.38-2.6 x."""

CAPPED_PROBE_STEPS = 100
"""STEEPEST for an adaptive optimizer whose steepest descent lay above the cap, probed: the cap
is a share of the edge read off other tasks, and where it binds the curve says nothing about
where below it the best rate sits (on the benchmark's Adam tasks, seeds 0-2, it ranged from
0.38 to 5.6 x the grid's best when it bound). Trainings of this many steps at fixed rates from
the cap down..."""
CAPPED_PROBES = 4
"""...halving, this many (the cap to an eighth of it): the rate whose training ended lowest.
50-step trainings there favour the upper rates (their loss falls faster at first, and noise
shows later); 100 steps put 35 of those 39 runs within 3x of the grid's best, against 33 for
the cap alone."""

# -- EDGE ------------------------------------------------------------------------------------
CURVE_WINDOW = 5
"""EDGE reads the log of the raw loss, its median over this many neighbouring steps, centred.
The exponential moving average STEEPEST reads lags: during a steep fall its minimum comes up
to ~3x in learning rate after the raw loss's (it remembers ~6 steps, half a decade at 12.5
steps a decade), and a lone batch spike moves a median not at all."""

VERTEX_SPAN = 3
"""The edge is the bottom of a parabola through this many points of the curve either side of
its low (in log lr): the sweep's steps are 20% apart, and the low point alone moved the edge by
that much between two initialisations of one network."""

EDGE_RISE = 1 / 3
"""EDGE needs an edge: past its low the curve climbs back by at least this share of its fall
(or a raw loss jumps back above the plateau). A loss still falling when the sweep reached
end_lr shows none, and 0.9 x end_lr would be a guess."""

MIN_FALL = 0.05
"""A sweep whose loss curve fell by less than this (in log: 5%) below its plateau shows no
fall whose bottom could be the edge of stability (its low is batch scatter: a two-layer
sigmoid network's sweep that stayed at ln 10 put it at 2e-4); its edge is then where the
curve first rises this much above the plateau (0.9 there)."""

FLAT_SWEEP = "the loss neither fell nor rose in the sweep"
"""EDGE's reason when the curve stayed within MIN_FALL of its plateau to the sweep's end: a
plain-SGD classifier that needs its rate (a sigmoid CNN, whose grid best was 3.2 on a sweep
to 10 flat all the way) gets no suggestion rather than the steepest descent of its scatter
(6e-6 there, 5e5 times too low)."""

EDGE_SHARE = 0.9
"""EDGE without probes (a sweep read from a file): the suggestion is this share of the edge.
On the benchmark's ReLU and tanh tasks of that kind the grid's best rate lies between 0.4 and
2.1 times the edge (sigmoid and linear networks: 6-20x, which only probes find)."""

PROBE_STEPS = 50
"""EDGE's probes: each trains this many steps at one fixed rate, from the initial weights..."""
PROBE_FIRST = 0.5
"""...the first at this share of the edge, each next one at PROBE_GROWTH times the last..."""
PROBE_GROWTH = 2.0
PROBE_MAX = 8
"""...at most this many (the last at 64 x the edge); each is scored by the loss of its final
weights, averaged over the batches it trained on (the same batches for every probe: they
differ by their rate only). The mean of its last batch losses instead averages the spikes
along the way: on a linear softmax the probes' order changed with which batches they saw."""
PROBE_KEEP = 0.9
"""The suggestion is the largest probed rate whose training made at least this share of the
best probe's progress (the fall from the untrained loss to its score): among rates that
train about as well over 50 steps, the largest goes furthest over hundreds (on the
benchmark's ReLU, tanh, sigmoid and linear tasks of that kind the grid's best rate over
200-2000 steps was never below half the best probe's). Probing stops at the first rate that
blows up or ends no lower than the untrained loss, or after PROBE_PATIENCE rates in a row
that made less progress than that..."""
PROBE_RATIO = 2.0
"""...or ended above this many times the best score: where the best probe gets the loss
near 0, every rate that trains at all makes 90% of its fall (a separable task trained
full-batch: 0.017 against the best 0.0067, at a rate whose double diverged)."""
PROBE_PATIENCE = 2

FLAT_PROBE_TOP = 2.0
"""A flat sweep (FLAT_SWEEP) of plain SGD on a classifier, probed: one step at each rate moved
nothing, so trainings at fixed rates look for the loss to move, from this many times the
sweep's last rate (it showed no edge up to there)..."""
FLAT_PROBE_RATES = 8
"""...down, PROBE_GROWTH times lower each, to 64 x below the sweep's last rate..."""
FLAT_PROBE_STEPS = (50, 150, 450)
"""...each as long as the first of these, then the next while no rate moved the loss: a
sigmoid CNN whose sweep to 10 stayed flat moved at no rate in 50 steps and at 1.26 in 150
(its grid best over 600 steps was 3.2)."""

NO_FALL_PROBE_RATES = 16
"""A sweep whose loss never went down is probed from its last rate down, PROBE_GROWTH times
lower each, at most this many rates (to 3e-4 below a sweep to 10): it shows no edge to start
near, so the probes descend until the scores stop improving (PROBE_PATIENCE)."""

ATTENTION_SHARE = 0.35
"""With attention layers, no probes: this share of the edge. Their stable rate falls as
training goes on (attention logits grow: Wortsman et al., 2023, "Small-scale proxies for
large-scale Transformer training instabilities"), later than a sweep or a probe sees: on the
benchmark's three transformers trained with plain SGD the grid's best rate was 0.31 x the
sweep's edge (one layer, 1000 steps), 0.40 x (two layers, 500) and 0.14 x (wider, 600), and
0.5 x diverged on the last two; a pre-LN character model with nn.MultiheadAttention trained
best at 1-1.4 x its edge over 500 steps (2 x diverged). No share is right for all: 0.35 is
within 3x of the first three, 2.9-4x below the last's best (0.25: 4-5.6x), and diverged on none."""


@dataclass(frozen=True)
class Suggestion:
    """A suggested rate (None: the loss never went down), the rule that chose it ("edge",
    "steepest" or "probed"), why, in words, the edge of stability it was read against, and
    the probes that chose it (EDGE, PROBED and a capped STEEPEST with a way to train)."""

    lr: float | None
    kind: str | None
    reason: str
    edge: float | None = None
    probes: tuple[tuple[float, float], ...] = ()    # EDGE's probes: (rate, score)


def smooth(losses: list[float], beta: float = 0.85) -> list[float]:
    """Exponential moving average with bias correction: avg_t / (1 - beta**t)."""
    avg, out = 0.0, []
    for t, loss in enumerate(losses, start=1):
        avg = beta * avg + (1 - beta) * loss
        out.append(avg / (1 - beta ** t))
    return out


def suggest_lr(lrs: list[float], smoothed: list[float], skip_start: int = 10,
               raw: list[float] | None = None, *, plain_sgd: bool = False,
               classification: bool = False, attention: bool = False,
               adaptive: bool = False) -> float | None:
    """The suggested learning rate of a sweep (see `choose_lr`). None when the loss never
    went down."""
    return choose_lr(lrs, smoothed, skip_start, raw, plain_sgd=plain_sgd,
                     classification=classification, attention=attention,
                     adaptive=adaptive).lr


def choose_lr(lrs: list[float], smoothed: list[float], skip_start: int = 10,
              raw: list[float] | None = None, *, plain_sgd: bool = False,
              classification: bool = False, attention: bool = False,
              adaptive: bool = False, probe: Probe | None = None) -> Suggestion:
    """Which rule the sweep calls for, and its suggestion. `smoothed` is the smoothed loss,
    `raw` the raw one (the smoothed one when not given); what the sweep ran: `plain_sgd` (SGD
    without momentum), `classification` (a classification loss: cross-entropy, NLL, BCE),
    `attention` (a network with attention layers), `adaptive` (Adam, RMSprop or another
    optimizer with per-parameter step sizes: ADAPTIVE_CAP); `probe` trains at a fixed rate (EDGE's
    probes; without it EDGE takes EDGE_SHARE of the edge). The rules are the module's."""
    n = len(lrs)
    if len(smoothed) != n or (raw is not None and len(raw) != n):
        raise ValueError(f"lrs, smoothed and raw must have the same length, got {n}, "
                         f"{len(smoothed)} and {None if raw is None else len(raw)}")
    if n < skip_start + 3:
        return Suggestion(None, None, "too few points after the first ones")
    raw = smoothed if raw is None else raw
    probes: tuple[tuple[float, float], ...] = ()
    cap = ADAPTIVE_CAP if adaptive else STEEPEST_CAP
    if adaptive:
        why_not = "the sweep ran an adaptive optimizer (Adam, RMSprop, ...), whose best rates " \
                  "sit well below the edge its sweep shows"
    elif not plain_sgd:
        why_not = "the sweep ran SGD with momentum, whose best rates sit well below the edge " \
                  "its sweep shows"
    elif not classification:
        why_not = "plain SGD on a loss that is not a classifier's (a regression's curvature " \
                  "does not fall as it learns)"
    else:
        edge = edge_rule(lrs, raw, skip_start, attention)
        untrained = float(np.median(raw[:max(skip_start, 1)]))
        if edge.reason == FLAT_SWEEP and probe is not None and not attention:
            return flat_probe_rule(float(lrs[-1]), probe, untrained)
        if edge.reason == FLAT_SWEEP:
            return Suggestion(None, None, f"{FLAT_SWEEP}: no rate can be read from it (the "
                              "steepest descent of a flat curve is batch scatter); a sweep to "
                              "a higher end_lr, or over more steps, shows where it falls")
        if edge.lr is not None and (probe is None or attention):
            return edge
        if edge.lr is not None:
            edge = probe_rule(edge, probe, untrained)
            if edge.lr is not None:
                return edge
        why_not, probes = edge.reason, edge.probes
    lr, edge_lr = steepest_rule(lrs, smoothed, skip_start, raw, relative=classification,
                                cap=cap)
    untrained = float(np.median(raw[:max(skip_start, 1)]))
    if lr is None and probe is not None and not attention:
        return no_fall_probe_rule(float(lrs[-1]), probe, untrained)
    if lr is None:
        return Suggestion(None, None, "the loss never went down")
    read = "the log of the smoothed loss (a classifier's)" if classification else \
        "the smoothed loss"
    steepest = (f"steepest: {why_not}; the steepest descent of {read}, at most the edge of "
                f"stability ({edge_lr:.2g}) / {cap:g}")
    if adaptive and probe is not None and not attention and math.isclose(lr, edge_lr / cap):
        return capped_probe_rule(steepest, lr, edge_lr, probe, untrained)
    return Suggestion(lr, "steepest", steepest, edge_lr, probes=probes)


def steepest_rule(lrs: list[float], smoothed: list[float], skip_start: int,
                  raw: list[float], relative: bool = False, cap: float = STEEPEST_CAP
                  ) -> tuple[float | None, float | None]:
    """STEEPEST: (suggestion, edge), on the smoothed loss after the first `skip_start` points.

    1. plateau = median of the next 10 smoothed losses; drop = plateau - minimum;
    2. the fall = from where the smoothed loss last leaves the plateau's band (FALL_BAND of
       the drop) before the minimum, to the minimum;
    3. edge of stability = the first of: the minimum of the smoothed loss, or the first step,
       once half the drop is done within the fall, whose raw loss is back above the plateau
       for SUSTAINED_SPIKE steps in a row, or once by more than SPIKE_SCATTER times the fall's
       batch scatter: the rate undid the whole fall, so it is past the edge even if the loss
       recovers later (Adam often does, and then keeps "improving");
    4. steepest = the rate where the smoothed loss falls fastest against log10(lr), searched
       over the fall up to the edge; with `relative` (a classifier), where its log falls
       fastest;
    5. suggestion = min(steepest, edge / cap) (STEEPEST_CAP; ADAPTIVE_CAP for Adam's kind).

    Steps 2 and 3 read the fall, not the noise: recurrent networks (a single batch spiking
    above the plateau mid-fall) and regressions with noisy batch losses (the smoothed loss
    dipping early by chance) put a version reading the first dip and any single spike 5-5000x
    below the best rate. (None, None) when the loss never went down.
    """
    loss = np.asarray(smoothed, dtype=float)
    spikes = np.asarray(raw, dtype=float)
    log_lr = np.log10(np.asarray(lrs, dtype=float))
    i_min = int(np.argmin(loss))
    if i_min <= skip_start:
        return None, None
    plateau = float(np.median(loss[skip_start:min(skip_start + 10, i_min)]))
    drop = plateau - loss[i_min]        # > 0: every point before the first minimum is higher
    start = _fall_start(loss, skip_start, i_min, plateau, drop)
    half = start + int(np.nonzero(loss[start:i_min + 1] <= plateau - 0.5 * drop)[0][0])
    edge = next((i for i in range(half, i_min) if _past_edge(spikes, i, start, plateau)), i_min)
    lo = max(start - 1, 0)
    hi = max(edge, lo + 2)
    fall = loss[lo:hi + 1]
    if relative and bool(np.all(fall > 0)):
        fall = np.log(fall)
    slope = np.gradient(fall, log_lr[lo:hi + 1])
    steepest = lrs[lo + int(np.argmin(slope))]
    return float(min(steepest, lrs[edge] / cap)), float(lrs[edge])


def edge_rule(lrs: list[float], raw: list[float], skip_start: int,
              attention: bool = False) -> Suggestion:
    """EDGE, for plain SGD on a classification loss: EDGE_SHARE (ATTENTION_SHARE with
    attention layers) x the edge of stability; Suggestion(None, ...) and the reason when the
    sweep shows no edge to read.

    The curve is the centred median of the log raw loss (CURVE_WINDOW), so its low is where
    the loss really bottomed out, not where a lagging average did. The edge is that low, or
    earlier the first step past half the fall whose raw loss is back above the plateau (as in
    STEEPEST), refined to the bottom of a parabola through the low's neighbours
    (VERTEX_SPAN); where the curve never fell by MIN_FALL, the first step it rose that much
    above its plateau."""
    losses = np.asarray(raw, dtype=float)
    if not np.all(losses > 0):
        return Suggestion(None, None, "the loss reached 0 or below, which has no log scale")
    curve = _centred_median(np.log(losses), CURVE_WINDOW)
    log_lr = np.log10(np.asarray(lrs, dtype=float))
    share = ATTENTION_SHARE if attention else EDGE_SHARE
    flat = float(np.median(curve[skip_start:skip_start + 10]))
    if flat - float(np.min(curve[skip_start:])) < MIN_FALL:
        rise = next((i for i in range(skip_start, len(curve)) if curve[i] > flat + MIN_FALL),
                    None)
        if rise is None:
            return Suggestion(None, None, FLAT_SWEEP)
        return Suggestion(share * float(lrs[rise]), "edge",
                          f"edge: plain SGD on a classification loss, which did not fall in "
                          f"the sweep (by less than {math.expm1(MIN_FALL):.0%}) and rose above "
                          f"its plateau at {lrs[rise]:.2g}, the edge of stability: "
                          f"{share:g} x the edge", float(lrs[rise]))
    i_min = skip_start + int(np.argmin(curve[skip_start:]))
    if i_min <= skip_start:
        return Suggestion(None, None, "the loss never went down")
    plateau = float(np.median(curve[skip_start:min(skip_start + 10, i_min)]))
    drop = plateau - float(curve[i_min])     # > 0, as in steepest_rule
    start = _fall_start(curve, skip_start, i_min, plateau, drop)
    level, plateau_loss = np.exp(curve), math.exp(plateau)
    halfway = plateau_loss - 0.5 * (plateau_loss - level[i_min])
    half = start + int(np.nonzero(level[start:i_min + 1] <= halfway)[0][0])
    spike = next((i for i in range(half, i_min) if _past_edge(losses, i, start, plateau_loss)),
                 None)
    if spike is None and float(np.max(curve[i_min:])) - curve[i_min] < EDGE_RISE * drop:
        return Suggestion(None, None, "the loss was still falling at the end of the sweep, "
                          "so there is no edge of stability to read (a higher end_lr shows it)")
    edge_lr = float(lrs[spike]) if spike is not None else _vertex(curve, log_lr, i_min)
    why = ("the network holds attention layers, whose stable rate falls later in training "
           "than a sweep sees" if attention else "its curvature falls as it grows confident, "
           "so the rate that trains best sits close to the edge")
    return Suggestion(share * edge_lr, "edge",
                      f"edge: plain SGD on a classification loss, which fell to "
                      f"{math.exp(-drop):.0%} of its plateau before the edge of stability "
                      f"({edge_lr:.2g}) stopped it; {why}: {share:g} x the edge", edge_lr)


def probe_rule(edge: Suggestion, probe: Probe, untrained: float) -> Suggestion:
    """EDGE, probed: train PROBE_STEPS steps at PROBE_FIRST x the edge, then PROBE_GROWTH
    times more each time (PROBE_MAX at most); the largest rate whose score (its final
    weights' mean loss on the batches it trained on) made PROBE_KEEP of the best score's
    fall from `untrained` and is within PROBE_RATIO of it. Stops at the first
    rate that blows up or ends no lower than `untrained` (the sweep's first losses), or after
    PROBE_PATIENCE rates in a row fell short of that. Suggestion(None, ...) and
    the reason when even the first probe did not train."""
    assert edge.edge is not None
    scores: list[tuple[float, float]] = []
    best, worse = math.inf, 0
    for k in range(PROBE_MAX):
        lr = edge.edge * PROBE_FIRST * PROBE_GROWTH ** k
        score = probe(lr, PROBE_STEPS)
        if not score < untrained:
            break
        scores.append((lr, score))
        if score < best:
            best, worse = score, 0
        elif not _kept(score, best, untrained):
            worse += 1
            if worse >= PROBE_PATIENCE:
                break
    if not scores:
        return Suggestion(None, None, f"a training at {PROBE_FIRST:g} x the edge of stability "
                          f"({edge.edge:.2g}) did not bring the loss below its untrained "
                          f"{untrained:.3g} in {PROBE_STEPS} steps", edge.edge,
                          probes=tuple(scores))
    bar = min(untrained - PROBE_KEEP * (untrained - best), PROBE_RATIO * best)
    lr, score = max((p for p in scores if _kept(p[1], best, untrained)), key=lambda p: p[0])
    tried = ", ".join(f"{r / edge.edge:.3g}x: {v:.3g}" for r, v in scores)
    return Suggestion(lr, "edge",
                      f"edge: plain SGD on a classification loss, whose curvature falls as it "
                      f"grows confident, so the rate that trains best sits near the sweep's "
                      f"edge of stability ({edge.edge:.2g}) or above it; {PROBE_STEPS} steps "
                      f"at multiples of the edge took the loss from {untrained:.3g} to "
                      f"{tried}: the largest rate that made {PROBE_KEEP:.0%} of the best "
                      f"probe's fall (to {bar:.3g} or lower) is {lr / edge.edge:.3g} x the "
                      f"edge",
                      edge.edge, probes=tuple(scores))


def capped_probe_rule(steepest: str, top: float, edge: float, probe: Probe, untrained: float
                      ) -> Suggestion:
    """STEEPEST of an adaptive optimizer, where the cap `top` (edge / ADAPTIVE_CAP) bound:
    trainings of CAPPED_PROBE_STEPS at `top` and CAPPED_PROBES - 1 rates below it, halving;
    the one whose score ended lowest. The cap itself when none brought the loss below
    `untrained`. `steepest` is STEEPEST's reason."""
    scores = [(lr, probe(lr, CAPPED_PROBE_STEPS))
              for lr in (top / PROBE_GROWTH ** k for k in range(CAPPED_PROBES))]
    trained = [(lr, score) for lr, score in scores if score < untrained]
    tried = ", ".join(f"{lr:.3g}: {score:.3g}" for lr, score in scores)
    if not trained:
        return Suggestion(top, "steepest", f"{steepest}; no training of "
                          f"{CAPPED_PROBE_STEPS} steps from there down brought the loss below "
                          f"its untrained {untrained:.3g} ({tried})", edge,
                          probes=tuple(scores))
    lr, _ = min(trained, key=lambda p: p[1])
    return Suggestion(lr, "probed", f"probed: {steepest}, which bound ({top:.3g}, a share "
                      f"read off other tasks): trainings of {CAPPED_PROBE_STEPS} steps at it "
                      f"and below took the loss from {untrained:.3g} to {tried}; the lowest "
                      f"ended at {lr:.3g}", edge, probes=tuple(scores))


def no_fall_probe_rule(top: float, probe: Probe, untrained: float) -> Suggestion:
    """A sweep whose loss never went down below its first points, probed: one step at each
    rate is too little for some networks (an LSTM regressing targets of spread ~9 under Adam:
    its sweep's scatter hid any fall), so fixed-rate trainings from the sweep's last rate
    `top` down (`_probe_down`)."""
    return _probe_down(top, probe, untrained, "the loss never went down in the sweep, one "
                       f"step at each rate up to {top:.3g}", "probed", NO_FALL_PROBE_RATES)


def flat_probe_rule(top: float, probe: Probe, untrained: float) -> Suggestion:
    """A flat sweep, probed: fixed-rate trainings from FLAT_PROBE_TOP x the sweep's last rate
    `top` down (`_probe_down`)."""
    return _probe_down(top * FLAT_PROBE_TOP, probe, untrained,
                       f"{FLAT_SWEEP} up to {top:.3g}, one step at each rate", "edge")


def _probe_down(first: float, probe: Probe, untrained: float, seen: str, kind: str,
                rates: int = FLAT_PROBE_RATES) -> Suggestion:
    """Fixed-rate trainings from `first` down, PROBE_GROWTH times lower each (`rates` at
    most), first FLAT_PROBE_STEPS[0] steps each, then longer while none moved the loss by
    MIN_FALL below `untrained`; at the first length where one did, the largest rate that made
    PROBE_KEEP of the best probe's fall (as EDGE's probes). Descending stops after
    PROBE_PATIENCE rates in a row short of that once one moved. `seen` says what the sweep
    showed; Suggestion(None, ...) when no probe moved the loss at any length."""
    moved_below = untrained * math.exp(-MIN_FALL)
    last = first / PROBE_GROWTH ** (rates - 1)
    probes: list[tuple[float, float]] = []
    for steps in FLAT_PROBE_STEPS:
        scores: list[tuple[float, float]] = []
        best, worse = math.inf, 0
        for k in range(rates):
            lr = first / PROBE_GROWTH ** k
            score = probe(lr, steps)
            probes.append((lr, score))
            if score < best and score < moved_below:
                best, worse = score, 0
            elif best < math.inf and not (score < untrained and _kept(score, best, untrained)):
                worse += 1
                if worse >= PROBE_PATIENCE:
                    break
            if score < untrained:
                scores.append((lr, score))
        if best < math.inf:
            lr, _ = max((p for p in scores if _kept(p[1], best, untrained)), key=lambda p: p[0])
            tried = ", ".join(f"{r:.3g}: {v:.3g}" for r, v in scores)
            highest = (" (the highest probed: a sweep to a higher end_lr shows whether a "
                       "higher one trains better)" if lr >= first else "")
            return Suggestion(lr, kind,
                              f"{'probed' if kind == 'probed' else kind + ', probed'}: "
                              f"{seen}; trainings of {steps} steps at fixed "
                              f"rates from {first:.3g} down took the loss from "
                              f"{untrained:.3g} to {tried}: the largest rate that made "
                              f"{PROBE_KEEP:.0%} of the best one's fall is {lr:.3g}{highest}",
                              None, probes=tuple(probes))
    return Suggestion(None, None, f"{seen}, and no training of {FLAT_PROBE_STEPS[-1]} steps at "
                      f"a fixed rate from {first:.3g} down to {last:.3g} brought the loss "
                      f"{math.expm1(MIN_FALL):.0%} below its untrained {untrained:.3g}: a "
                      f"sweep to a higher end_lr shows where it falls",
                      None, probes=tuple(probes))


def _kept(score: float, best: float, untrained: float) -> bool:
    """Did a probe that ended at `score` make PROBE_KEEP of the best probe's fall from
    `untrained`, and end within PROBE_RATIO of it?"""
    return score <= untrained - PROBE_KEEP * (untrained - best) and score <= PROBE_RATIO * best


def _fall_start(curve: np.ndarray, skip_start: int, i_min: int, plateau: float,
                drop: float) -> int:
    """Where the curve last leaves the plateau's band (FALL_BAND of the drop) before its
    minimum."""
    in_band = np.nonzero(curve[skip_start:i_min + 1] > plateau - FALL_BAND * drop)[0]
    return min(skip_start + int(in_band[-1]) + 1 if len(in_band) else skip_start, i_min)


def _centred_median(values: np.ndarray, window: int) -> np.ndarray:
    """Each value's median with its neighbours, `window` in all (fewer at the ends)."""
    half = window // 2
    return np.array([np.median(values[max(i - half, 0):i + half + 1])
                     for i in range(len(values))])


def _vertex(curve: np.ndarray, log_lr: np.ndarray, i: int) -> float:
    """The rate at the bottom of a parabola through the curve's VERTEX_SPAN points either side
    of its low `i` (in log lr), kept within them."""
    lo, hi = max(i - VERTEX_SPAN, 0), min(i + VERTEX_SPAN + 1, len(curve))
    a, b, _ = np.polyfit(log_lr[lo:hi], curve[lo:hi], 2)
    x = -b / (2 * a) if a > 0 else log_lr[i]
    return float(10 ** min(max(x, log_lr[lo]), log_lr[hi - 1]))


def _past_edge(raw: np.ndarray, i: int, start: int, plateau: float) -> bool:
    """Is step `i` past the edge of stability: its raw loss back above the plateau for
    SUSTAINED_SPIKE steps, or once by more than the fall's batch scatter can explain?"""
    if raw[i] <= plateau:
        return False
    if i + SUSTAINED_SPIKE <= len(raw) and bool(np.all(raw[i:i + SUSTAINED_SPIKE] > plateau)):
        return True
    scatter = np.abs(np.diff(raw[max(start - 1, 0):i], 2))
    return len(scatter) > 0 and raw[i] - plateau > SPIKE_SCATTER * float(np.median(scatter))
