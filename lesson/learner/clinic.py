"""What a clinic notebook shows of a catalogue case: its card and its broken script."""
from __future__ import annotations

import importlib
import inspect
import textwrap


def show_case(name: str) -> None:
    """Print a case's symptom and target, then the source of its broken training script."""
    from broken_models import CATALOGUE

    if name not in CATALOGUE:
        raise ValueError(f"no case {name!r} in the catalogue")
    case = CATALOGUE[name]
    module = importlib.import_module(case.module)
    print(f"{case.title}\n")
    print(f"symptom: {case.symptom}")
    print(f"target:  {case.target}\n")
    print(textwrap.dedent(inspect.getsource(module.train_broken)))
