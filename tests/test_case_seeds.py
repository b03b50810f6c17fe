"""Every catalogue case holds on seeds that nobody could tune it on.

`test_catalogue.py` trains each case on seeds 0-2, the clinics grade on 0, 5 and 11, and
`benchmarks/bench_case_seeds.py` sweeps 0-199; a case that works only there teaches luck. Here
each case trains, broken and fixed, on `commit_seeds()`: COMMIT_SEED_COUNT (8) seeds drawn from
the commit being tested, a different set on every commit (`NNDEBUG_SEEDS=...` replays one). The
broken script shows its symptom, is diagnosed with nothing unexplained and misses the target;
the fixed one is healthy. One test per case, so xdist spreads the cases (`-n 2`); the fast tests
check what the sweep judges by and how it draws. The sweep trains 864 scripts (20 seeds, 2160
scripts, took 40 minutes of CI's 90), so it is marked `seeds`: `make test-seeds` runs it, `make
test` leaves it out, and CI (`.ci/run`) runs both.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from broken_models import CATALOGUE, Outcome
from broken_models.seeds import (COMMIT_SEED_COUNT, FIRST_UNSEEN_SEED, broken_problems,
                                 commit_id, commit_seeds, fixed_problems, parse_seeds, problems,
                                 seeds_for, sweep_run)
from lesson.findings import Finding

SWEEP_SEEDS = commit_seeds()


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """NumPy's BLAS threads fight the xdist workers for the two cores; one each is faster."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def test_each_commit_draws_its_own_seeds_apart_from_every_tuned_one():
    a, b = seeds_for("14d422d" + "0" * 33), seeds_for("b5ce8c1" + "0" * 33)
    assert len(set(a)) == len(set(b)) == COMMIT_SEED_COUNT and set(a) != set(b)
    assert a == seeds_for("14d422d" + "0" * 33), "the same commit draws the same seeds"
    assert min(a + b) >= FIRST_UNSEEN_SEED > 199   # not the benchmark's 0-199, tests', clinics'
    assert seeds_for(commit_id()) == commit_seeds() or "NNDEBUG_SEEDS" in os.environ


def test_the_commit_is_git_head_and_a_checkout_without_git_still_draws(tmp_path):
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent).stdout.strip()
    assert commit_id() == head
    (tmp_path / "broken_models").mkdir()
    (tmp_path / "broken_models" / "page.py").write_text("x = 1\n")
    first = commit_id(tmp_path)
    (tmp_path / "broken_models" / "page.py").write_text("x = 2\n")
    assert len(first) == 64 and commit_id(tmp_path) != first


def test_a_seed_set_can_be_replayed(monkeypatch):
    assert parse_seeds("3,5,100-102") == (3, 5, 100, 101, 102)
    monkeypatch.setenv("NNDEBUG_SEEDS", "7, 300-301")
    assert commit_seeds() == (7, 300, 301)
    for bad in ("", "a", "5-3", "1-", "-4"):
        with pytest.raises(ValueError, match="seed"):
            parse_seeds(bad)


def _judged(name: str, metrics: dict, codes: tuple[str, ...]):
    case = CATALOGUE[name]
    findings = [Finding(c, "made up for the test") for c in codes]
    return case.evaluate(lambda seed: Outcome(metrics, findings=findings), seed=0)


def test_a_broken_run_that_hides_its_bug_is_a_problem():
    ok = _judged("lr_too_low", CATALOGUE["lr_too_low"].run_broken(0).metrics, ("LR_TOO_LOW",))
    assert broken_problems(ok) == []
    quiet = _judged("lr_too_low", ok.metrics, ())
    assert broken_problems(quiet) == ["missing LR_TOO_LOW"]
    noisy = _judged("lr_too_low", ok.metrics, ("LR_TOO_LOW", "LABELS_SHUFFLED"))
    assert broken_problems(noisy) == ["unexplained LABELS_SHUFFLED"]


def test_a_fixed_run_with_any_finding_or_a_missed_target_is_a_problem():
    good = CATALOGUE["lr_too_low"].run_fixed(0)
    assert fixed_problems(good) == [] and problems(CATALOGUE["lr_too_low"], 0, "fixed") == []
    flagged = _judged("lr_too_low", good.metrics, ("DEAD_NEURONS",))
    assert fixed_problems(flagged) == ["findings DEAD_NEURONS"]
    broken = _judged("lr_too_low", CATALOGUE["lr_too_low"].run_broken(0).metrics, ())
    assert "target missed" in fixed_problems(broken)


def test_problems_refuses_an_unknown_kind_and_a_bad_seed():
    case = CATALOGUE["lr_too_low"]
    with pytest.raises(ValueError, match="which must be"):
        problems(case, 0, "both scripts")
    with pytest.raises(ValueError, match="seed must be"):
        problems(case, -1)


def test_a_sweep_run_measures_each_promise_with_its_sign():
    case = CATALOGUE["lr_too_low"]
    broken, fixed = sweep_run(case, 0, "broken"), sweep_run(case, 0, "fixed")
    assert broken.problems == fixed.problems == ()
    # the broken run shows the symptom and misses the target; the fixed one the opposite:
    # each promise kept is a positive margin, and it is the case's own check's margin
    assert broken.symptom_margin > 0 and broken.target_margin > 0
    assert fixed.symptom_margin > 0 and fixed.target_margin > 0
    run = case.run_fixed(0)
    assert fixed.target_margin == pytest.approx(run.metrics["val_accuracy"] - 0.9)
    with pytest.raises(ValueError, match="which must be"):
        sweep_run(case, 0, "both")


#: cases whose promise does not hold on every seed (issue 30 is open until each does): expected
#: failures that may pass, so CI's sweep reports them (XFAIL or XPASS in its summary) without
#: stopping the rest. Each reason says how often, measured with benchmarks/bench_case_seeds.py;
#: replay a seed with NNDEBUG_SEEDS=...
FRAGILE = {
    "overfitting": "the 50-image run's validation loss keeps falling slowly instead of "
                   "climbing on 8 of seeds 0-999 (58, 217, 436, ...; 16 of 0-199 in full "
                   "batches at 3e-3, before mini-batches of 64 at 5e-3), and the fixed run's "
                   "climbs on 2 of seeds 0-499 (205, 281): a rate or a width that makes "
                   "every 50-image run climb makes some 1000-image runs climb too",
    "post_ln_no_warmup": "the run without warm-up stalls on every one of seeds 0-99, and on 2 "
                         "of 100-199 (168, 183) it leaves its plateau late, as the cosine decay "
                         "lowers the rate (2.68 -> 2.52 after step 200), which WARMUP_MISSING "
                         "reads as a model still learning (seed 109, a stall at 0.886 of the "
                         "targets' entropy, is named since the stall bar went from 0.9 to "
                         "0.85); the warmed-up fix holds on all 200. At a peak of 3e-2 without "
                         "clipping 3 of 70 seeds learnt slowly instead; 5e-2 breaks 92 of 100 "
                         "fixes, 4e-2 4 of 30",
}


def _cases() -> list:
    """Every case; those the debugger does not diagnose yet (tests/test_catalogue.py's known
    tool issues) as strict expected failures, the FRAGILE ones as expected failures that may
    pass."""
    from tests.test_catalogue import KNOWN_TOOL_ISSUES

    known = {name: reason for (name, _, _), reason in KNOWN_TOOL_ISSUES.items()}
    params = []
    for n in CATALOGUE:
        if n in known:
            params.append(pytest.param(n, marks=[pytest.mark.xfail(reason=known[n], strict=True)]))
        elif n in FRAGILE:
            params.append(pytest.param(n, marks=[pytest.mark.xfail(reason=FRAGILE[n],
                                                                    strict=False)]))
        else:
            params.append(n)
    return params


@pytest.mark.slow
@pytest.mark.seeds
@pytest.mark.parametrize("name", _cases())
def test_the_case_holds_on_every_seed_of_this_commit(name):
    case = CATALOGUE[name]
    failing = {seed: found for seed in SWEEP_SEEDS if (found := problems(case, seed))}
    assert failing == {}, (f"{name} fails on {len(failing)} of the {len(SWEEP_SEEDS)} seeds of "
                           f"this commit: {failing} (replay: NNDEBUG_SEEDS="
                           f"{','.join(map(str, failing))} make test-seeds)")
