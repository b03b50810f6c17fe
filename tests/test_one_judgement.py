"""One judgement: the report's cause/consequence relations and the clinic's verdict agree.

The report shows a finding as following from another (`explained_by`, from
`lesson.findings.EXPLAINS`); the clinic grades a diagnosis by the case page's CAUSES and
CONSEQUENCES. A student who learns "the cause is the finding that explains the others" from
the report must not be told the opposite by the grader: no code the report shows as following
from another is accepted as the cause, and no code it shows as a root is called a consequence.
"""
from __future__ import annotations

import pytest

from broken_models import CATALOGUE
from lesson.course.learner.clinic import judge_diagnosis
from lesson.course.learner.repair import reference
from lesson.findings import EXPLAINS, Finding, sort_findings

SEEDS = range(5)


def _reachable(start: str) -> set[str]:
    """Every code `start` explains, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for code in EXPLAINS.get(todo.pop(), ()):
            if code not in seen:
                seen.add(code)
                todo.append(code)
    return seen


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_every_consequence_can_be_shown_following_from_a_cause(name):
    """The card cannot call a code a consequence that the report could never link to a cause."""
    case = CATALOGUE[name]
    for code in case.consequences:
        assert any(code in _reachable(cause) for cause in case.causes), (
            f"{name}: {code} is a CONSEQUENCE, but no cause of {case.causes} explains it "
            "(lesson.findings.EXPLAINS)")


def _name_and_seeds() -> list:
    """Every case on seeds 0-2 (`make test`) and on 3-4 (`make test-seeds`; CI runs both)."""
    return [pytest.param(name, seeds, id=f"{name}-{seeds[0]}-{seeds[-1]}",
                         marks=[pytest.mark.seeds] if seeds[0] > 0 else [])
            for name in CATALOGUE for seeds in (tuple(SEEDS[:3]), tuple(SEEDS[3:]))]


@pytest.mark.slow
@pytest.mark.parametrize("name,seeds", _name_and_seeds())
def test_the_grader_agrees_with_the_report_on_seeds_0_to_4(name, seeds):
    case = CATALOGUE[name]
    disagreements = []
    for seed in seeds:
        # a case with several causes is judged by the report of its reference run (trained
        # once per process); one with a single cause reads no report
        run = reference(name, seed).broken if len(case.causes) > 1 else case.run_broken(seed)
        for f in run.findings:
            kind = judge_diagnosis(name, f.code, seed=seed).kind
            if f.explained_by and kind == "cause":
                disagreements.append(f"seed {seed}: the report shows {f.code} following from "
                                     f"{f.explained_by}, the grader accepts it as the cause")
            if f.explained_by is None and kind == "consequence":
                disagreements.append(f"seed {seed}: the report shows {f.code} as a root, the "
                                     "grader calls it a consequence")
    assert disagreements == [], f"{name}: " + "; ".join(dict.fromkeys(disagreements))


def test_a_cause_the_report_shows_following_from_another_is_a_consequence_there(monkeypatch):
    """The exploding cases list both codes as causes (a run whose state stays moderate while
    only its gradient explodes shows EXPLODING_GRADIENT as the report's root). Before issue 30
    the grader accepted EXPLODING_GRADIENT where the report showed it following from
    EXPLODING_ACTIVATIONS; now the report of that seed decides."""
    from types import SimpleNamespace

    from lesson.course.learner import repair

    found = sort_findings([Finding("EXPLODING_GRADIENT", "g", step=0),
                           Finding("EXPLODING_ACTIVATIONS", "a", step=0)])
    follower = next(f for f in found if f.explained_by)
    assert (follower.code, follower.explained_by) == ("EXPLODING_GRADIENT",
                                                      "EXPLODING_ACTIVATIONS")
    for name in ("exploding_deep", "exploding_rnn"):
        verdict = judge_diagnosis(name, "EXPLODING_GRADIENT")            # the visible seed
        assert verdict.kind == "consequence" and "EXPLODING_ACTIVATIONS" not in verdict.message
        assert judge_diagnosis(name, "EXPLODING_ACTIVATIONS").right
    # a seed whose report roots the gradient: there it is the cause
    alone = SimpleNamespace(broken=SimpleNamespace(findings=sort_findings([
        Finding("EXPLODING_GRADIENT", "g", step=0), Finding("NAN_OR_INF", "n", step=3)])))
    monkeypatch.setattr(repair, "reference", lambda name, seed: alone)
    assert judge_diagnosis("exploding_rnn", "EXPLODING_GRADIENT", seed=1234).right


def test_the_lesson_tables_name_the_code_the_grader_calls_the_cause():
    """A table row's code is what a student looks for in the report: it must be the case's
    cause as the grader judges it (the exploding cases' rows said EXPLODING_GRADIENT, the Adam
    case's NAN_OR_INF: consequences)."""
    from lesson.sections import case_rows

    wrong = []
    for name, case in CATALOGUE.items():
        for row in case_rows(case.family, name):
            code = row["code"].strip("`")
            if not judge_diagnosis(name, code).right:
                wrong.append(f"{name}: {code}")
    assert wrong == []


def test_the_model_answer_names_the_cause_the_grader_accepts():
    """The clinics' model answer is the page's first CAUSE: it must be the one the report of
    the visible seed roots (the exploding cases listed EXPLODING_GRADIENT first, which follows
    from EXPLODING_ACTIVATIONS there: the solutions lost their diagnosis points)."""
    for name, case in CATALOGUE.items():
        assert judge_diagnosis(name, case.causes[0]).right, (name, case.causes)
