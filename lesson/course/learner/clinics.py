"""The clinics: every catalogue case is an exercise, under a neutral label.

A clinic is one nbgrader assignment per family of the catalogue (`clinic1_not_learning`, ...),
and each of its cases is named by its place, `case1_3` (clinic 1, case 3), never by the bug: the
name and title say what is wrong, and a diagnosis point must measure debugging, not reading. The
case page is the one source: the clinics, their cases, their hints and their notebooks
(`clinic_notebooks.py`) are all derived from `broken_models.PAGES`, so a new page is a new
exercise. The bug's name is told once the case is solved (`ClinicCase.solved_line`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from broken_models.case import FAMILIES

#: family -> (assignment folder, notebook file); the order is the teaching order of FAMILIES
ASSIGNMENTS: dict[str, tuple[str, str]] = {
    "not_learning": ("clinic1_not_learning", "not_learning.ipynb"),
    "nan_inf": ("clinic2_nan_inf", "nan_inf.ipynb"),
    "bad_model": ("clinic3_bad_model", "bad_model.ipynb"),
    "pytorch": ("clinic4_pytorch", "pytorch_pitfalls.ipynb"),
    "backward": ("clinic5_backward", "backward.ipynb"),
    "sequence": ("clinic6_sequence", "sequence.ipynb"),
}
#: seeds the repair is graded on: the visible test's, then the hidden tests' (unseen)
VISIBLE_SEED = 0
HIDDEN_SEEDS = (5, 11)
_LABEL = re.compile(r"case(\d+)_(\d+)")

#: how to gather the evidence with each tool, and what to read in its output
TOOL_HINTS: dict[str, str] = {
    "monitor": "Run the broken script under the debugger: `outcome = broken_{ident}(seed=0)`, "
               "then `outcome.debugger.print_report()`. Read the findings from the top: the one "
               "that explains the others is the cause; the ones it explains are consequences.",
    "overfit": "Try to overfit one batch (`overfit_one_batch`): a model that cannot drive one "
               "batch's loss to ~0 has a bug in the model, the loss or the update.",
    "lr_finder": "Sweep the learning rate (`find_learning_rate`) and compare its suggestion with "
                 "the rate the script uses.",
    "gradient_check": "Compare the analytic gradients with numerical ones "
                      "(`outcome = broken_{ident}(seed=0)`, then read `outcome.findings`): the "
                      "parameter with the largest relative error is where backward is wrong.",
    "batch_independence": "Check that one sample's output does not depend on the others "
                          "(`outcome = broken_{ident}(seed=0)`, then `outcome.findings`).",
    "causality": "Ask whether an output position sees inputs after it: `outcome = "
                 "broken_{ident}(seed=0)`, then read `outcome.findings` (check_causality "
                 "names the first position and the first module that leak).",
    "nonfinite": "Find the first operation that produced a NaN or Inf: `outcome = "
                 "broken_{ident}(seed=0)`, then read `outcome.findings` (locate_nonfinite names "
                 "the module and the operation).",
    "data_validator": "The bug is in the data, before any training: `outcome = "
                      "broken_{ident}(seed=0)`, then read `outcome.findings` from validate_data.",
    "label_issues": "Ask whether the labels carry signal: `outcome = broken_{ident}(seed=0)`, "
                    "then read `outcome.findings` from the label checks.",
}


@dataclass(frozen=True)
class ClinicCase:
    """One case as the clinics show it: its neutral label and where it lives."""

    ident: str          # "case1_3": the diagnosis key, the cells' ids, `repaired_case1_3`
    clinic: int         # 1-based, in FAMILIES order
    number: int         # 1-based, in the family's teaching order
    name: str           # the catalogue's name: a spoiler, shown only once solved

    @property
    def heading(self) -> str:
        return f"Case {self.clinic}.{self.number}"

    @property
    def repair(self) -> str:
        """The name of the student's repaired training function."""
        return f"repaired_{self.ident}"

    @property
    def broken(self) -> str:
        """The name the broken script is shared under in the notebook."""
        return f"broken_{self.ident}"

    @property
    def assignment(self) -> str:
        return ASSIGNMENTS[self.case.family][0]

    @property
    def case(self) -> Any:
        from broken_models import CATALOGUE

        return CATALOGUE[self.name]

    @property
    def test_ids(self) -> tuple[str, str]:
        """The grade ids of its diagnosis test and its repair test."""
        return f"test_{self.ident}_diagnosis", f"test_{self.ident}_repair"

    @property
    def hints(self) -> tuple[str, ...]:
        """From general to specific, all read from the case page: the lesson's section (by its
        exact heading, in both languages) and the symptom; which tool to run, and which of its
        outputs to read and what in it (EVIDENCE); the kind of change, never its value
        (CHANGE)."""
        case = self.case
        return (lesson_hint(case.lesson) + f" What you see: {case.symptom}",
                TOOL_HINTS[case.tool].format(ident=self.ident)
                + (f" {case.evidence}" if case.evidence else ""),
                f"The kind of change the fix needs: {case.change or case.fix}")

    @property
    def solved_line(self) -> str:
        """Told once the diagnosis is right: the case's name and title."""
        return f"{self.heading} is `{self.name}`: {self.case.title}."


def lesson_hint(heading: str) -> str:
    """Where to read in the lesson: the section by its exact heading (and the one it sits
    under), in lesson/README.md and in its Spanish twin."""
    from lesson.sections import parent, spanish

    above = parent(heading)
    above_es = None if above is None else spanish(above)
    return (f"Read the lesson's section \"{heading}\""
            + (f" (under \"{above}\")" if above else "") + " in lesson/README.md; in Spanish, "
            f"\"{spanish(heading)}\"" + (f" (under \"{above_es}\")" if above_es else "")
            + " in lesson/README.es.md.")


@lru_cache(maxsize=1)
def _all() -> tuple[ClinicCase, ...]:
    from broken_models import PAGES

    counts: dict[str, int] = {}
    cases = []
    families = list(FAMILIES)
    for page in PAGES:
        family, name = page.split(".")
        counts[family] = counts.get(family, 0) + 1
        clinic = families.index(family) + 1
        cases.append(ClinicCase(f"case{clinic}_{counts[family]}", clinic, counts[family], name))
    return tuple(cases)


def clinic_cases(family: str | None = None) -> list[ClinicCase]:
    """Every case of the clinics in teaching order (only one family's with `family`)."""
    if family is not None and family not in FAMILIES:
        raise ValueError(f"no family named {family!r}; families: {', '.join(FAMILIES)}")
    return [c for c in _all() if family is None or c.case.family == family]


def find_clinic_case(label: Any) -> ClinicCase:
    """The case labelled `label` ("case1_3", also "1.3"); a ValueError says what exists."""
    if not isinstance(label, str):
        raise TypeError(f"a case label is a string such as \"case1_3\", got {label!r}")
    text = label.strip()
    dotted = re.fullmatch(r"(\d+)\.(\d+)", text)
    if dotted:
        text = f"case{dotted.group(1)}_{dotted.group(2)}"
    for case in _all():
        if text in (case.ident, case.name):
            return case
    raise ValueError(f"no clinic case {label!r}: the cases are case1_1 ... "
                     f"{_all()[-1].ident} (`nndebug exercises` lists them)")


def is_case_label(text: str) -> bool:
    """Whether `text` is written like a case label (so the CLI should look it up as one)."""
    return bool(_LABEL.fullmatch(text) or re.fullmatch(r"\d+\.\d+", text))
