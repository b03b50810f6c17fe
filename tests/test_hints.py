"""Hints that teach: hint 1 names the lesson's section by its exact heading (resolved in the
English and the Spanish text), hint 2 is the case's own (which output to read, what in it),
hint 3 the kind of change and never its value."""
from __future__ import annotations

import re

import pytest

from lesson.course.learner.clinics import clinic_cases
from lesson.sections import ENGLISH, SPANISH, headings, parent, sections, spanish

CASES = clinic_cases()
QUOTED = re.compile(r'"([^"]+)"')
#: a number written as a value: a digit not inside a name (BatchNorm1d, log_softmax)
VALUE = re.compile(r"(?<![\w.])\d")


def test_the_two_lessons_share_one_outline():
    en, es = headings(ENGLISH), headings(SPANISH)
    assert [level for level, _ in en] == [level for level, _ in es]
    assert len(sections()) == len(en) - 1


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.ident)
def test_hint_one_names_sections_that_exist_in_both_languages(case):
    hint = case.hints[0]
    quoted = QUOTED.findall(hint)
    en_headings = {text for _, text in headings(ENGLISH)}
    es_headings = {text for _, text in headings(SPANISH)}
    lesson = case.case.lesson
    assert quoted[0] == lesson and lesson in en_headings
    assert spanish(lesson) in quoted and spanish(lesson) in es_headings
    above = parent(lesson)
    if above is not None:
        assert above in quoted and spanish(above) in quoted
    for text in quoted:                       # every section the hint names is a heading
        assert text in en_headings or text in es_headings, (case.ident, text)


def test_the_old_titles_do_not_resolve():
    """What hint 1 said before issue 30: no such heading in the lesson."""
    with pytest.raises(ValueError, match="no section"):
        spanish("Symptom 1: the loss does not decrease")


def test_hint_two_is_the_cases_own():
    seconds = [c.hints[1] for c in CASES]
    assert len(set(seconds)) == len(seconds)
    for case in CASES:
        assert case.case.evidence and case.case.evidence in case.hints[1], case.ident


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.ident)
def test_hint_three_says_the_kind_of_change_never_the_value(case):
    hint = case.hints[2]
    assert case.case.change and case.case.change in hint
    assert not VALUE.search(hint), (case.ident, hint)
    for code in case.case.causes:             # nor the answer to the diagnosis
        assert code not in hint
