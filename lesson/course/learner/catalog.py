"""The course's exercises, in order, with their hints: the written exercises from
`exercises.toml`, then one clinic per family of the catalogue (`clinics.py`), whose cases are
exercises of their own, then the capstone (`exercises.toml`, `after_clinics = true`)."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

METADATA = Path(__file__).with_name("exercises.toml")


@dataclass(frozen=True)
class Exercise:
    """One nbgrader assignment of the course: a notebook the learner fills in."""

    name: str          # the assignment folder, e.g. "ex1_exploding_gradients"
    notebook: str      # the notebook's file name inside it
    title: str
    hints: tuple[str, ...]
    cases: tuple[str, ...] = ()   # a clinic's case labels ("case1_3"), in order
    #: for one case of a clinic: its clinic's folder, its test cells, its answer cell
    assignment: str = ""
    tests: tuple[str, ...] = ()
    answer_cells: tuple[str, ...] = ()
    #: test cell -> the requirements of the text its visible part checks, in the order its
    #: asserts do (each is the start of its assert's message)
    requirements: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def folder(self) -> str:
        return self.assignment or self.name

    def released(self, root: Path) -> Path:
        """The learner's working copy: exercises/<assignment>/<notebook>."""
        return root / "exercises" / self.folder / self.notebook

    def solution(self, root: Path) -> Path:
        """The instructor's notebook: solutions/<assignment>/<notebook>."""
        return root / "solutions" / self.folder / self.notebook


def clinic_exercises() -> list[Exercise]:
    """One exercise per clinic, derived from the catalogue (its hints point to the cases')."""
    from broken_models.case import FAMILIES
    from lesson.course.learner.clinics import ASSIGNMENTS, clinic_cases

    out = []
    for number, (family, symptom) in enumerate(FAMILIES.items(), 1):
        folder, notebook = ASSIGNMENTS[family]
        cases = tuple(c.ident for c in clinic_cases(family))
        hints = (f"Work case by case: `nndebug check {cases[0]}` checks one case, and "
                 f"`nndebug hint {cases[0]}` gives that case's hints, from general to specific.",
                 "The debugger's report lists a cause before the findings it explains: the "
                 "diagnosis is the cause, not the loudest consequence.",
                 "Copy the printed script into your cell, rename it repaired_caseN_M, and change "
                 "only the lines the bug needs; keep every line that measures or reports.")
        out.append(Exercise(folder, notebook, f"Clinic {number}: {symptom}", hints, cases))
    return out


def load_exercises(path: Path = METADATA) -> list[Exercise]:
    """All exercises in teaching order: the written ones, then the clinics, then the written
    ones marked `after_clinics` (the capstone)."""
    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    written = {False: [], True: []}
    for e in data["exercise"]:
        written[bool(e.get("after_clinics", False))].append(Exercise(
            e["name"], e["notebook"], e["title"], tuple(e["hints"]),
            requirements=tuple((test, tuple(texts)) for test, texts
                               in e.get("requirements", {}).items())))
    exercises = written[False] + clinic_exercises() + written[True]
    names = [e.name for e in exercises]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: an exercise name appears twice")
    return exercises


def case_exercise(label: str) -> Exercise:
    """One case of a clinic as an exercise of its own: checked, hinted and remembered alone."""
    from lesson.course.learner.clinics import ASSIGNMENTS, find_clinic_case

    case = find_clinic_case(label)
    folder, notebook = ASSIGNMENTS[case.case.family]
    return Exercise(case.ident, notebook, f"{case.heading} of clinic {case.clinic}", case.hints,
                    assignment=folder, tests=case.test_ids, answer_cells=(case.ident,))


def find_exercise(name: str, exercises: list[Exercise]) -> Exercise:
    """The exercise called `name` (a unique prefix such as "ex1" also works), or the clinic
    case labelled `name` ("case1_3", "1.3")."""
    from lesson.course.learner.clinics import is_case_label

    if is_case_label(name):
        return case_exercise(name)
    exact = [e for e in exercises if e.name == name]
    matches = exact or [e for e in exercises if e.name.startswith(name)]
    if not matches:
        known = ", ".join(e.name for e in exercises)
        raise ValueError(f"no exercise matches {name!r}; the exercises are: {known}; "
                         "a clinic's cases are named case1_1, case1_2, ...")
    if len(matches) > 1:
        raise ValueError(f"{name!r} matches more than one exercise: "
                         f"{', '.join(e.name for e in matches)}")
    return matches[0]


def find_course_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` holding nbgrader_config.py and exercises/."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "nbgrader_config.py").is_file() and (folder / "exercises").is_dir():
            return folder
    raise ValueError(f"no course found at or above {here}: run nndebug from the course "
                     "repository (the folder with nbgrader_config.py), or pass --course-dir")
