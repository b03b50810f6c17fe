"""`nndebug list` and `nndebug show CASE`: read the catalogue from the terminal.

`list` prints the cases family by family with the symptom each shows. `show` prints a case's
symptom and its broken script (what you would see in your own run), and only on request the
answer: `--diff` adds the title, the codes, the unified diff from the broken script to the fixed
one, the fix and the lesson section. Names, titles and codes name the bug, so both commands
call a case by its clinic label (`case1_3`) and show the rest only with `--spoilers` / `--diff`.
"""
from __future__ import annotations

import argparse
import sys
import textwrap


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    if command == "list":
        parser.add_argument("--family", metavar="NAME", help="list only one family")
        parser.add_argument("--spoilers", action="store_true",
                            help="also print each case's name, title and codes (they name the bug)")
    else:
        parser.add_argument("case", metavar="CASE",
                            help="a case label from `nndebug list` (case1_3), or a case's name")
        parser.add_argument("--diff", action="store_true",
                            help="also show the bug: the diff broken -> fixed, the fix, the lesson")
        parser.add_argument("--source", choices=["broken", "fixed"],
                            help="print the whole broken (or fixed) training script")


def _wrap(label: str, text: str) -> str:
    return textwrap.fill(text, width=96, initial_indent=f"{label:<9}", subsequent_indent=" " * 9)


def list_cases(family: str | None = None, spoilers: bool = False) -> str:
    """The catalogue as text: one block per family, one line per case, by label (its symptom;
    with `spoilers`, its name, title and codes)."""
    from broken_models import FAMILIES, by_family
    from lesson.course.learner.clinics import find_clinic_case

    lines: list[str] = []
    groups = by_family(family)
    width = max((len(c.name) for cases in groups.values() for c in cases), default=0)
    for fam, cases in groups.items():
        lines.append(f"{FAMILIES[fam]}  ({fam}, {len(cases)} cases)")
        for c in cases:
            label = find_clinic_case(c.name).ident
            lines.append(f"  {label:<8} " + (f"{c.name:<{width}}  {c.title}  "
                                              f"[{', '.join(c.expected)}]" if spoilers
                                              else c.symptom))
        lines.append("")
    total = sum(len(c) for c in groups.values())
    lines.append(f"{total} cases. `nndebug show CASE` for one, `nndebug clinic` to diagnose them all"
                 + ("." if spoilers else "; `--spoilers` names them."))
    return "\n".join(lines)


def show_case(name: str, diff: bool = False, source: str | None = None) -> str:
    """A case page as text, by label: symptom first; with `diff`, the bug and its fix."""
    from broken_models import FAMILIES
    from broken_models.script import case_script
    from lesson.course.learner.clinics import find_clinic_case

    found = find_clinic_case(name)
    case, label = found.case, found.ident
    lines = [f"{label} ({case.name}): {case.title}" if diff else label,
             f"({FAMILIES[case.family]})", "",
             _wrap("Symptom", case.symptom), _wrap("Tool", case.tool), ""]
    lines += [case_script(case, source or "broken").printed()]
    if not diff:
        lines.append(f"Find the bug in the script above (run it with `{case.tool}` watching); "
                     f"`nndebug show {label} --diff` reveals it, `--source fixed` prints the fix.")
        return "\n".join(lines)
    lines += [_wrap("Codes", ", ".join(case.expected)
                    + (f" (may also show: {', '.join(case.secondary)})" if case.secondary else "")),
              _wrap("Fix", case.fix), _wrap("Target", case.target), _wrap("Lesson", case.lesson)]
    if case.reference:
        lines.append(_wrap("In the wild", case.reference))
    lines += ["", case.diff()]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        if args.command == "list":
            print(list_cases(args.family, spoilers=args.spoilers))
        else:
            print(show_case(args.case, diff=args.diff, source=args.source))
    except ValueError as exc:
        print(f"nndebug {args.command}: {exc}", file=sys.stderr)
        return 2
    return 0
