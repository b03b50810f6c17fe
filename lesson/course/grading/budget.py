"""How long a notebook's answers normally take, and the time budget a submission gets.

The per-call timeout stops one endless call; the budget bounds a whole submission (a function
that loops for every test that calls it, a slow answer called many times). Its default is a
few times the notebook's normal time: the wall time the instructor's own solution spends in the
sandbox, measured once per gradebook (kept in the table `nndebug_normal_time`, keyed by the
solution's hash, so an edited solution is measured again), and never less than two timeouts,
so that one interrupted call always leaves room for the rest of the notebook.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

#: a submission may spend this many times the solution's time in its sandbox
BUDGET_FACTOR = 4.0
_TABLE = "nndebug_normal_time"


def budget_for(normal_s: float | None, timeout_s: float) -> float:
    """The default budget of a notebook whose solution takes `normal_s` seconds."""
    return max(BUDGET_FACTOR * (normal_s or 0.0), 2.0 * timeout_s)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


def _table(gb: Any):
    from sqlalchemy import Column, Float, MetaData, String, Table

    table = Table(_TABLE, MetaData(),
                  Column("assignment", String(128), primary_key=True),
                  Column("notebook", String(128), primary_key=True),
                  Column("source", String(64), nullable=False),
                  Column("seconds", Float, nullable=False))
    table.create(gb.engine, checkfirst=True)
    return table


def recorded(url: str, assignment: str, notebook: str, source: str) -> float | None:
    """The normal time kept for this solution (its hash `source`), if any."""
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        table = _table(gb)
        with gb.engine.connect() as conn:
            row = conn.execute(table.select().where(table.c.assignment == assignment,
                                                    table.c.notebook == notebook)).first()
    return float(row.seconds) if row is not None and row.source == source else None


def record(url: str, assignment: str, notebook: str, source: str, seconds: float) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        table = _table(gb)
        with gb.engine.begin() as conn:
            conn.execute(table.delete().where(table.c.assignment == assignment,
                                              table.c.notebook == notebook))
            conn.execute(table.insert(), [{"assignment": assignment, "notebook": notebook,
                                           "source": source, "seconds": float(seconds)}])


def measure(text: str, timeout_s: float, memory_mb: int, deny: list[str]) -> float:
    """Grade the solution `text` in the clean room; the seconds its answers took."""
    import nbformat

    from .cleanroom import grade_notebook
    from .sandbox import Limits

    nb = nbformat.reads(text, as_version=4)
    verdicts = grade_notebook(nb, Limits(timeout_s=timeout_s, memory_mb=memory_mb), deny=deny)
    if verdicts.error:
        raise RuntimeError(f"the solution could not be run to measure it: {verdicts.error}")
    return verdicts.spent


def solution_path(root: Path, source_directory: str, assignment: str, notebook: str) -> Path:
    return Path(root) / source_directory / assignment / f"{notebook}.ipynb"


def normal_time(url: str, assignment: str, notebook: str, solution: Path, timeout_s: float,
                memory_mb: int, deny: list[str]) -> float | None:
    """The solution's time, as kept in the gradebook or measured now (and kept); None
    where the instructor's solution is not in the course folder."""
    if not solution.is_file():
        return None
    text = solution.read_text(encoding="utf-8")
    source = digest(text)
    seconds = recorded(url, assignment, notebook, source)
    if seconds is None:
        seconds = measure(text, timeout_s, memory_mb, deny)
        record(url, assignment, notebook, source, seconds)
    return seconds
