"""Attention, read: rows that are sharp from the start, and weight put on padding.

Attention turns a row of scores into weights with a softmax. Three silent bugs show in those
weights, and nowhere else:

* ATTENTION_SATURATED: scores not divided by sqrt(d) are sqrt(d) times too spread out; the
  softmax puts most of each row on a few keys from the first step, passes little gradient,
  and learning crawls. Measured as each row's entropy over the log of the number of keys it
  may attend to (1 for uniform weights, 0 for one-hot): a scaled attention starts above 0.9,
  an unscaled one with head size 64 at 0.5 or below (SATURATED_ENTROPY).
* ATTENTION_ON_PADDING: no key padding mask where the batch holds padding: the real tokens'
  rows put weight on padded keys (about the padding's share of the keys at the start).
* PADDING_MASK_INVERTED: the mask hides the real keys and keeps the padding: the real tokens'
  rows put all their weight on the padding.

The debugger hands this inspector the attention it sees through the function mode
(`F.scaled_dot_product_attention`, `F.multi_head_attention_forward`, which nn.MultiheadAttention
and the nn.Transformer layers call, and a softmax over a (..., T, T) score tensor in
hand-written attention), on full statistics steps only. Each call costs one extra computation
of the attention weights, on the tensors' own device; the evidence stays there as running sums
(no host sync) until `findings()` reads it.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn import functional as F

from lesson.debugger.running import RunningStats, to_host
from lesson.findings import Finding

MASKED_SCORE = -1e4
"""A score at or below this is a mask, not a score: masks are -inf, finfo.min (-3.4e38), -1e9
or BERT's -10000; real scores of attention stay within a few tens of 0."""

SATURATED_ENTROPY = 0.6
"""ATTENTION_SATURATED: mean normalised row entropy at or below this. 1 is uniform. Scaled
attention starts at 0.92-1 whatever the head size (scores spread by 0.02-0.65 under PyTorch's
Linear init, nn.MultiheadAttention's xavier init and GPT-2's std 0.02, causal or not); unscaled,
a head of size 64 starts at 0.46 under the Linear init (scores spread by 2.5) and 0.23 under
xavier, size 32 at 0.63 and 0.33, size 128 at 0.34 and 0.15 (unscaled under GPT-2's init the
scores start small: nothing to see from the start). ALiBi's distance biases, sharp by design,
keep the rows of 512 keys and 16 heads at 0.70."""

SATURATED_MIN_ROWS = 16
"""...over at least this many rows that may attend to 2 keys or more (a row with one allowed
key, the first of a causal mask, is one-hot by construction and is not counted)."""

PAD_MASS = 0.01
"""ATTENTION_ON_PADDING: the real tokens' rows put at least this share of their weight on
padded keys, on average over the rows that can see a padded key. A masked padding gets exactly
0 (exp(-inf)); an unmasked one starts near its share of the keys (1/T at the least)."""

PAD_KEYS_MASKED = 0.5
"""...while at most this share of the padded keys those rows can see is masked: padding that
is masked is not the bug, whatever weight a too weak mask still lets through."""

INVERTED_MASS = 0.9
"""PADDING_MASK_INVERTED: the real tokens' rows put at least this share of their weight on
padded keys..."""

INVERTED_REAL_MASKED = 0.9
"""...and at least this share of the real keys they should see (keys at or before the query,
which a causal mask keeps too) is masked: the mask hides the tokens, not the padding."""

MIN_PADDED_ROWS = 4
"""Weight-on-padding verdicts need at least this many real-token rows that can see a padded
key..."""

MIN_REAL_KEYS = 16
"""...and the inverted-mask verdict at least this many (real query, real key) pairs."""


def entropy_stats(probs: torch.Tensor, allowed: torch.Tensor) -> dict[str, torch.Tensor]:
    """Sums over rows (last dimension: keys) of the normalised entropy and the largest weight,
    for rows with >= 2 allowed keys and finite weights; and how many rows that is."""
    n = allowed.sum(-1)
    ok = (n >= 2) & torch.isfinite(probs).all(-1)
    entropy = torch.special.entr(torch.nan_to_num(probs, nan=0.0)).sum(-1)
    norm = entropy / torch.log(n.clamp_min(2).to(probs.dtype))
    return {"entropy": torch.where(ok, norm, 0.0).sum(),
            "max_weight": torch.where(ok, probs.amax(-1), 0.0).sum(),
            "rows": ok.sum()}


def padding_stats(probs: torch.Tensor, allowed: torch.Tensor, key_pad: torch.Tensor,
                  query_pad: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """Weight on padded keys, from the real queries' rows, for the keys at or before each
    query ("past", which a causal mask keeps) and for all keys ("all"): whether the attention
    is causal is told later, from how many real future keys were masked. `probs`/`allowed`
    are (B, H, Tq, Tk); `key_pad` (B, Tk) and `query_pad` (B, Tq) are True at padding."""
    b, _, tq, tk = probs.shape
    kp = key_pad[:, None, None, :]
    real_q = torch.ones(b, 1, tq, 1, dtype=torch.bool, device=probs.device) \
        if query_pad is None else ~query_pad[:, None, :, None]
    # masks are counted on every real row; weights only on rows that have some (a row whose
    # every key is masked is NaN, or uniform under a finite mask value)
    finite = real_q & torch.isfinite(probs).all(-1, keepdim=True) \
        & allowed.any(-1, keepdim=True)
    weights = torch.nan_to_num(probs, nan=0.0)
    past = torch.ones(tq, tk, dtype=torch.bool, device=probs.device).tril(tk - tq)
    out: dict[str, torch.Tensor] = {}
    for region, keys in (("past", past), ("all", torch.ones_like(past)),
                         ("future", ~past)):
        pad_keys = kp & keys & real_q
        real_keys = ~kp & keys & real_q
        out[f"{region}_pad_keys"] = pad_keys.expand_as(allowed).sum()
        out[f"{region}_pad_masked"] = (pad_keys & ~allowed).sum()
        out[f"{region}_real_keys"] = real_keys.expand_as(allowed).sum()
        out[f"{region}_real_masked"] = (real_keys & ~allowed).sum()
        if region == "future":
            break
        rows = (pad_keys & finite).any(-1, keepdim=True)
        out[f"{region}_rows"] = rows.expand(-1, probs.shape[1], -1, -1).sum()
        out[f"{region}_mass"] = torch.where(rows, (weights * (kp & keys)).sum(-1, keepdim=True),
                                            0.0).sum()
    return out


_SUMS = ("entropy", "max_weight", "rows", "calls") + tuple(
    f"{region}_{what}" for region in ("past", "all", "future")
    for what in ("pad_keys", "pad_masked", "real_keys", "real_masked", "rows", "mass")
    if region != "future" or what not in ("rows", "mass"))


@dataclass
class _Site:
    """One place attention is computed (a module, or a call inside one)."""

    kind: str
    first_step: int | None = None
    steps: list[int] = field(default_factory=list)
    #: step -> running sums (the saturation verdict reads the first steps one by one)
    early: dict[int, RunningStats] = field(default_factory=dict)
    total: RunningStats = field(default_factory=lambda: RunningStats(_SUMS))
    heads: int = 1
    scale: float | None = None       # the scale an SDPA call was given, if any


EARLY_STEPS = 10
"""Steps whose attention rows are kept apart for the "from the start" verdict (the debugger's
warm-up measures every one of them)."""


class AttentionInspector:
    """Attention weights in, ATTENTION_SATURATED / ATTENTION_ON_PADDING /
    PADDING_MASK_INVERTED out. Feed it with `observe_scores` or `observe_probs`."""

    def __init__(self) -> None:
        self.sites: dict[str, _Site] = {}

    @property
    def seen(self) -> bool:
        """Was any attention observed?"""
        return bool(self.sites)

    # -- on statistics steps -----------------------------------------------------------------
    @torch.no_grad()
    def observe_scores(self, site: str, kind: str, scores: torch.Tensor, step: int,
                       key_pad: torch.Tensor | None = None,
                       query_pad: torch.Tensor | None = None, scale: float | None = None
                       ) -> None:
        """Attention scores (..., Tq, Tk), masked entries at or below MASKED_SCORE."""
        s = scores.detach().float()
        allowed = s > MASKED_SCORE
        probs = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)
        self._observe(site, kind, probs, allowed, step, key_pad, query_pad, scale)

    @torch.no_grad()
    def observe_probs(self, site: str, kind: str, probs: torch.Tensor, step: int,
                      key_pad: torch.Tensor | None = None,
                      query_pad: torch.Tensor | None = None) -> None:
        """Attention weights (..., Tq, Tk) (a weight of exactly 0 counts as masked)."""
        p = probs.detach().float()
        self._observe(site, kind, p, p > 0, step, key_pad, query_pad, None)

    def _observe(self, name: str, kind: str, probs: torch.Tensor, allowed: torch.Tensor,
                 step: int, key_pad: torch.Tensor | None, query_pad: torch.Tensor | None,
                 scale: float | None) -> None:
        if probs.dim() < 2 or probs.shape[-1] < 2:
            return
        site = self.sites.get(name)
        if site is None:
            site = self.sites[name] = _Site(kind, first_step=step)
        site.scale = scale if scale is not None else site.scale
        sums: dict[str, Any] = entropy_stats(probs, allowed) | {"calls": 1}
        batched = _as_bhqk(probs, key_pad)
        if batched is not None and key_pad is not None:
            p4, a4 = batched, _as_bhqk(allowed, key_pad)
            site.heads = p4.shape[1]
            qp = query_pad if query_pad is not None and query_pad.shape == \
                (p4.shape[0], p4.shape[2]) else None
            sums |= padding_stats(p4, a4, key_pad.to(p4.device),
                                  None if qp is None else qp.to(p4.device))
        site.total.update(probs.device, sums=sums)
        if len(site.early) < EARLY_STEPS or step in site.early:
            early = site.early.setdefault(step, RunningStats(_SUMS))
            early.update(probs.device, sums=sums)
        if step not in site.steps:
            site.steps.append(step)

    # -- when diagnosing ---------------------------------------------------------------------
    def findings(self) -> list[Finding]:
        """The attention bugs seen (one finding per code, at the first site that shows it)."""
        if not self.sites:
            return []
        parts: dict[str, torch.Tensor | None] = {}
        for name, s in self.sites.items():
            parts[f"{name}\0total"] = s.total.packed()
            parts |= {f"{name}\0{k}": v.packed() for k, v in s.early.items()}
        host = to_host(parts)
        found: dict[str, Finding] = {}
        for name, site in self.sites.items():
            total = site.total.unpack(host[f"{name}\0total"])
            early = {k: site.early[k].unpack(host[f"{name}\0{k}"]) for k in site.early}
            for f in (_saturated(name, site, early), _on_padding(name, site, total)):
                if f is not None and f.code not in found:
                    found[f.code] = f
        return list(found.values())


def _as_bhqk(t: torch.Tensor, key_pad: torch.Tensor | None) -> torch.Tensor | None:
    """Attention laid out as (B, H, Tq, Tk) for a batch of B rows (`key_pad`'s): (B, H, Tq,
    Tk) as is, (B, Tq, Tk) with one head, (B*H, Tq, Tk) batch-major (nn.MultiheadAttention's
    layout); None when the batch cannot be told."""
    if key_pad is None or t.dim() < 3 or key_pad.shape[-1] != t.shape[-1]:
        return None
    b = key_pad.shape[0]
    if t.dim() == 4 and t.shape[0] == b:
        return t
    if t.dim() == 3 and t.shape[0] == b:
        return t.unsqueeze(1)
    if t.dim() == 3 and t.shape[0] % b == 0:
        return t.reshape(b, t.shape[0] // b, *t.shape[1:])
    return None


def _share(a: float, b: float) -> float:
    return a / b if b else 0.0


def _saturated(name: str, site: _Site, early: dict[int, dict[str, float]]) -> Finding | None:
    """ATTENTION_SATURATED: saturated at the site's first step and on average over its early
    steps (from the start, not a head that learnt to focus)."""
    if not early:
        return None
    first = early[min(early)]
    rows = sum(v["rows"] for v in early.values())
    if first["rows"] < SATURATED_MIN_ROWS or rows < SATURATED_MIN_ROWS:
        return None
    h_first = first["entropy"] / first["rows"]
    h_mean = sum(v["entropy"] for v in early.values()) / rows
    if h_first > SATURATED_ENTROPY or h_mean > SATURATED_ENTROPY:
        return None
    top = sum(v["max_weight"] for v in early.values()) / rows
    scale = f" (it was called with scale={site.scale:.3g})" if site.scale is not None else ""
    return Finding(
        "ATTENTION_SATURATED",
        f"attention rows in {name} are sharp from the first step: their entropy is "
        f"{h_mean:.2f} of a uniform row's (scaled attention starts above 0.9), the largest "
        f"weight averages {top:.2f}{scale}; scores not scaled by 1/sqrt(d) saturate the "
        "softmax, which then passes little gradient",
        layer=name.split("/")[0] or None,
        evidence={"site": name, "kind": site.kind, "normalized_entropy": round(h_mean, 4),
                  "first_step_entropy": round(h_first, 4), "mean_max_weight": round(top, 4),
                  "rows": int(rows), "steps": sorted(early)[:EARLY_STEPS], "scale": site.scale,
                  "threshold": SATURATED_ENTROPY},
        step=min(early))


CAUSAL_MASKED = 0.99
"""Attention is causal when at least this share of the real keys after a real query are
masked while at most CAUSAL_PAST_MASKED of those at or before it are: then only the padded keys
at or before the query can be the padding's fault."""

CAUSAL_PAST_MASKED = 0.5
"""(A mask that hides the real keys before the query too is no causal mask.)"""


def _on_padding(name: str, site: _Site, v: dict[str, float]) -> Finding | None:
    """PADDING_MASK_INVERTED, else ATTENTION_ON_PADDING (see the thresholds)."""
    causal = v["future_real_keys"] > 0 and \
        _share(v["future_real_masked"], v["future_real_keys"]) >= CAUSAL_MASKED and \
        _share(v["past_real_masked"], v["past_real_keys"]) <= CAUSAL_PAST_MASKED
    region = "past" if causal else "all"
    rows = v[f"{region}_rows"]
    real_keys = v[f"{region}_real_keys"]
    if rows < MIN_PADDED_ROWS and real_keys < MIN_REAL_KEYS:
        return None
    mass = v[f"{region}_mass"] / rows if rows else math.nan
    pad_masked = _share(v[f"{region}_pad_masked"], v[f"{region}_pad_keys"])
    real_masked = _share(v[f"{region}_real_masked"], real_keys)
    layer = name.split("/")[0] or None
    evidence = {"site": name, "kind": site.kind,
                "mass_on_padding": round(mass, 4) if rows else None,
                "padded_keys_masked": round(pad_masked, 4),
                "real_keys_masked": round(real_masked, 4), "rows": int(rows), "causal": causal}
    if real_keys >= MIN_REAL_KEYS and real_masked >= INVERTED_REAL_MASKED \
            and (rows < MIN_PADDED_ROWS or mass >= INVERTED_MASS):
        seen = f"{mass:.0%} of their attention goes to padded keys" if rows >= MIN_PADDED_ROWS \
            else "no key is left to them"
        return Finding(
            "PADDING_MASK_INVERTED",
            f"in {name} the real tokens are kept from each other: {real_masked:.0%} of the real "
            f"keys they should see are masked and {seen}. The key padding mask is the wrong "
            "way round (True must mark the padding; an attention_mask's 1 marks the real "
            "tokens)",
            layer=layer, evidence=evidence, step=site.first_step)
    if rows >= MIN_PADDED_ROWS and mass >= PAD_MASS and pad_masked <= PAD_KEYS_MASKED:
        return Finding(
            "ATTENTION_ON_PADDING",
            f"in {name} the real tokens put {mass:.1%} of their attention on padded keys, "
            f"which no mask hides ({pad_masked:.0%} of them masked): each output mixes in "
            "padding and depends on how much of it its batch got",
            layer=layer, evidence=evidence, step=site.first_step)
    return None


# -- turning the calls the function mode sees into scores or weights --------------------------
def sdpa_scores(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[torch.Tensor, float]:
    """The scores F.scaled_dot_product_attention(q, k, v, ...) turned into weights, masks
    applied as it applies them (a bool attn_mask is True where attention is allowed), and the
    scale it used."""
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
             "enable_gqa")
    bound = dict(zip(names, args)) | kwargs
    q, k = bound["query"].detach().float(), bound["key"].detach().float()
    if bound.get("enable_gqa") and q.dim() >= 3 and k.shape[-3] != q.shape[-3]:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    scale = bound.get("scale")
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = (q @ k.transpose(-2, -1)) * scale
    tq, tk = scores.shape[-2:]
    mask = bound.get("attn_mask")
    if bound.get("is_causal"):
        causal = torch.ones(tq, tk, dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if isinstance(mask, torch.Tensor):
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask.to(scores.device), float("-inf"))
        else:
            scores = scores + mask.detach().float().to(scores.device)
    return scores, scale


_MHA_PARAMETERS = list(inspect.signature(F.multi_head_attention_forward).parameters)


def mha_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """An F.multi_head_attention_forward call's arguments by name."""
    return dict(zip(_MHA_PARAMETERS, args)) | kwargs


def mha_weights(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """Per-head weights (B, H, Tq, Tk) of an F.multi_head_attention_forward call, computed
    again with need_weights=True and dropout off (nn.MultiheadAttention's training calls ask
    for none)."""
    bound = mha_arguments(args, kwargs)
    if not isinstance(bound.get("query"), torch.Tensor) or bound["query"].dim() != 3:
        return None                     # unbatched (T, E): nothing to align with a batch
    bound |= {"need_weights": True, "average_attn_weights": False, "training": False,
              "dropout_p": 0.0}
    _, weights = F.multi_head_attention_forward(**bound)
    return weights


__all__ = ["AttentionInspector", "sdpa_scores", "mha_arguments", "mha_weights", "SATURATED_ENTROPY",
           "PAD_MASS", "INVERTED_MASS"]
