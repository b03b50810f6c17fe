"""Seeds no case was tuned on, and how far a run on one of them is from breaking its case's promise.

A case promises, on every seed:

* the broken script shows its symptom, is diagnosed (every EXPECTED code, nothing unexplained)
  and does not reach the target;
* the fixed script is healthy (no finding at all, the target reached) and shows no symptom.

`problems(case, seed)` lists in words every way a run misses that promise; `sweep_run` also
measures how close it came, as margins of the case's symptom and target checks
(`broken_models.checks`: positive when the promise holds, in the check's units).

`commit_seeds()` draws the seeds CI's sweep uses from the commit being tested: a different set
on every commit, none of them the benchmark's 0-199, the tests' 0-2 or the clinics' 0, 5, 11,
so no seed list can be tuned to. `NNDEBUG_SEEDS=7,12` or `NNDEBUG_SEEDS=300-319` replays a set.
"""
from __future__ import annotations

import hashlib
import math
import os
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path

from broken_models.case import MAX_SEED, Case, Run

#: how many seeds CI's sweep draws per commit: 8 x 54 cases x 2 scripts, about 15 minutes on two
#: cores (20 took 40 and pushed CI toward its limit); every commit draws 8 new ones
COMMIT_SEED_COUNT = 8
#: the lowest seed CI may draw: below it lie the benchmark's 0-199, the tests' and the clinics'
FIRST_UNSEEN_SEED = 200
_ROOT = Path(__file__).resolve().parents[1]


def parse_seeds(text: str) -> tuple[int, ...]:
    """Seeds written as "3", "100-119" or "3,5,100-119"; a ValueError says what is wrong."""
    seeds: list[int] = []
    for part in text.replace(" ", "").split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"seeds are written like 3, 100-119 or 3,5,100-119; got {text!r}")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first or last > MAX_SEED:
            raise ValueError(f"bad seed range {part!r} (from low to high, at most {MAX_SEED})")
        seeds.extend(range(first, last + 1))
    return tuple(dict.fromkeys(seeds))


def commit_id(root: Path = _ROOT) -> str:
    """The commit being tested (git's HEAD); without git, a hash of the catalogue's sources, so
    a changed catalogue still draws new seeds."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        digest = hashlib.sha256()
        for path in sorted((root / "broken_models").rglob("*.py")):
            digest.update(path.read_bytes())
        return digest.hexdigest()


def seeds_for(commit: str, count: int = COMMIT_SEED_COUNT) -> tuple[int, ...]:
    """`count` distinct seeds drawn from `commit` (any string), all >= FIRST_UNSEEN_SEED."""
    rng = random.Random(hashlib.sha256(commit.encode()).digest())
    return tuple(sorted(rng.sample(range(FIRST_UNSEEN_SEED, 2**31), count)))


def commit_seeds(count: int = COMMIT_SEED_COUNT) -> tuple[int, ...]:
    """The seeds of CI's sweep: `NNDEBUG_SEEDS` when set, else drawn from the commit."""
    given = os.environ.get("NNDEBUG_SEEDS", "").strip()
    return parse_seeds(given) if given else seeds_for(commit_id(), count)


def broken_problems(run: Run) -> list[str]:
    """How a broken run misses its card: the symptom, the diagnosis, the target."""
    out = []
    if not run.symptom_seen:
        out.append("symptom not seen")
    if run.missing:
        out.append(f"missing {','.join(run.missing)}")
    if run.unexplained:
        out.append(f"unexplained {','.join(run.unexplained)}")
    if run.target_reached:
        out.append("target reached")
    return out


def fixed_problems(run: Run) -> list[str]:
    """How a fixed run misses being healthy: any finding, the target missed, the symptom."""
    out = []
    if run.findings:
        out.append(f"findings {','.join(run.codes)}")
    if not run.target_reached:
        out.append("target missed")
    if run.symptom_seen:
        out.append("symptom seen")
    return out


@dataclass(frozen=True)
class SeedRun:
    """One script of one case on one seed, as the sweep keeps it."""

    case: str
    seed: int
    which: str                   # "broken" or "fixed"
    problems: tuple[str, ...]    # [] when the case's promise holds
    symptom_margin: float        # the symptom check's margin, signed so that > 0 is as promised
    target_margin: float         # the target check's margin, likewise (broken: missed)
    codes: tuple[str, ...]
    seconds: float


def sweep_run(case: Case, seed: int, which: str) -> SeedRun:
    """Run one script on one seed and measure it against the case's promise."""
    if which not in ("broken", "fixed"):
        raise ValueError(f"which must be 'broken' or 'fixed', got {which!r}")
    run = case.run_broken(seed) if which == "broken" else case.run_fixed(seed)
    sign = 1.0 if which == "broken" else -1.0
    found = broken_problems(run) if which == "broken" else fixed_problems(run)
    return SeedRun(case.name, seed, which, tuple(found), _signed(sign, run.symptom_margin),
                   _signed(-sign, run.target_margin), tuple(run.codes), run.seconds)


def _signed(sign: float, margin: float) -> float:
    return margin if math.isnan(margin) else sign * margin


def problems(case: Case, seed: int, which: str = "both") -> list[str]:
    """Every problem of `case` on `seed`, each prefixed "broken:" or "fixed:"; [] when clean."""
    if which not in ("both", "broken", "fixed"):
        raise ValueError(f"which must be 'both', 'broken' or 'fixed', got {which!r}")
    kinds = ("broken", "fixed") if which == "both" else (which,)
    return [f"{kind}: {p}" for kind in kinds for p in sweep_run(case, seed, kind).problems]
