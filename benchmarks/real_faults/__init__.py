"""Reproductions of publicly reported training faults, for `bench_real_faults.py`.

Not the teaching catalogue (`broken_models/`): these are faults reported in public projects,
issue trackers and the fault benchmarks of the literature, reproduced small and offline, to
measure the debugger on bugs it was not built from. One module per fault, each holding `FAULT`
(see `harness.Fault`); `FAULTS` collects every module that defines one, in file-name order
(the prefix names the taxonomy group by convention: m_, t_, tr_, api_). A new group of faults
is new modules and its name in `harness.GROUPS`; nothing else changes.
"""
from __future__ import annotations

import importlib
import pkgutil

from .harness import Fault

FAULTS: dict[str, Fault] = {}
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name != "harness" and not _info.ispkg:
        _fault = getattr(importlib.import_module(f"{__name__}.{_info.name}"), "FAULT", None)
        if isinstance(_fault, Fault):
            object.__setattr__(_fault, "name", _info.name)
            FAULTS[_info.name] = _fault
