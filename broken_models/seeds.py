"""Seeds no test or clinic was tuned on, and what goes wrong with a case on one of them.

The catalogue's tests train every case on seeds 0-2 and the clinics grade on 0, 5 and 11; a case
that only works there teaches luck, not the bug. `problems(case, seed)` runs the broken and the
fixed script on one seed and lists, in words, every way the run misses the case's promise:

* the broken script shows its symptom, is diagnosed (every EXPECTED code, nothing unexplained)
  and does not reach the target;
* the fixed script is healthy (no finding at all, the target reached) and shows no symptom.
"""
from __future__ import annotations

from broken_models.case import Case, Run

#: 20 seeds beyond the tests' (0-2) and the clinics' (0, 5, 11)
UNSEEN_SEEDS: tuple[int, ...] = tuple(range(100, 120))


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


def problems(case: Case, seed: int, which: str = "both") -> list[str]:
    """Every problem of `case` on `seed`, each prefixed "broken:" or "fixed:"; [] when clean."""
    if which not in ("both", "broken", "fixed"):
        raise ValueError(f"which must be 'both', 'broken' or 'fixed', got {which!r}")
    out = []
    if which in ("both", "broken"):
        out += [f"broken: {p}" for p in broken_problems(case.run_broken(seed))]
    if which in ("both", "fixed"):
        out += [f"fixed: {p}" for p in fixed_problems(case.run_fixed(seed))]
    return out
