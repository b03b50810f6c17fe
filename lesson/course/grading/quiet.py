"""nbgrader without its false alarms, each silenced where it is raised.

- `OverwriteCells` reports "Attribute 'checksum' for cell ... has changed!" for every locked
  test cell with hidden tests, in every submission, the untouched release included: the
  release's copy lacks the hidden lines by design, so its checksum always differs from the
  gradebook's. This subclass stays silent exactly when the submitted cell is the released
  cell; an edited test cell, a changed lock or changed points are still reported.
- nbgrader's gradebook code uses SQLAlchemy APIs that SQLAlchemy 2 flags as deprecated
  (`SADeprecationWarning`, `MovedIn20Warning`) or warns about its relationships
  (`SAWarning`); `quiet_sqlalchemy` ignores those categories when they come from nbgrader's
  own modules, and nothing else.
"""
from __future__ import annotations

import copy
from typing import Any

from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests
from nbgrader.preprocessors import OverwriteCells as _NbgraderOverwriteCells


def quiet_sqlalchemy() -> None:
    """Ignore SQLAlchemy's deprecation and relationship warnings raised by nbgrader's code."""
    import warnings

    from sqlalchemy import exc

    for category in (exc.SADeprecationWarning, exc.SAWarning,
                     getattr(exc, "MovedIn20Warning", exc.SADeprecationWarning)):
        warnings.filterwarnings("ignore", category=category, module=r"nbgrader(\.|$)")


class OverwriteCells(_NbgraderOverwriteCells):
    """nbgrader's OverwriteCells, silent about the checksum of an untouched released test."""

    _released = False

    def _is_released(self, cell: Any, grade_id: str) -> bool:
        """Whether `cell` is word for word the release of the gradebook's cell `grade_id`."""
        from nbgrader.api import MissingEntry

        try:
            source = self.gradebook.find_source_cell(grade_id, self.notebook_id,
                                                     self.assignment_id)
        except MissingEntry:
            return False
        released = copy.deepcopy(cell)
        released.source = source.source
        try:
            ClearHiddenTests(config=self.config)._remove_hidden_test_region(released)
        except RuntimeError:
            return False
        return released.source.strip() == cell.source.strip()

    def preprocess_cell(self, cell: Any, resources: Any, cell_index: int) -> tuple[Any, Any]:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        self._released = bool(grade_id) and utils.is_locked(cell) and \
            self._is_released(cell, grade_id)
        return super().preprocess_cell(cell, resources, cell_index)

    def report_change(self, name: str, attr: str, old: Any, new: Any) -> None:
        if attr == "checksum" and self._released:
            return
        super().report_change(name, attr, old, new)


quiet_sqlalchemy()
