"""The course's exercises, in order, with their hints (read from `exercises.toml`)."""
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

    def released(self, root: Path) -> Path:
        """The learner's working copy: exercises/<name>/<notebook>."""
        return root / "exercises" / self.name / self.notebook

    def solution(self, root: Path) -> Path:
        """The instructor's notebook: solutions/<name>/<notebook>."""
        return root / "solutions" / self.name / self.notebook


def load_exercises(path: Path = METADATA) -> list[Exercise]:
    """All exercises in teaching order."""
    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    exercises = [Exercise(e["name"], e["notebook"], e["title"], tuple(e["hints"]))
                 for e in data["exercise"]]
    names = [e.name for e in exercises]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: an exercise name appears twice")
    return exercises


def find_exercise(name: str, exercises: list[Exercise]) -> Exercise:
    """The exercise called `name` (a unique prefix such as "ex1" also works)."""
    exact = [e for e in exercises if e.name == name]
    matches = exact or [e for e in exercises if e.name.startswith(name)]
    if not matches:
        known = ", ".join(e.name for e in exercises)
        raise ValueError(f"no exercise matches {name!r}; the exercises are: {known}")
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
