"""The lesson text's sections: the headings of `lesson/README.md` and of its Spanish twin,
`lesson/README.es.md`, paired.

A case page names the section it illustrates by its exact English heading; the clinics' first
hint names it in both languages. The two texts have the same outline (a test holds them to
it), so the n-th heading of one is the n-th of the other.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENGLISH, SPANISH = HERE / "README.md", HERE / "README.es.md"
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def headings(path: Path) -> list[tuple[int, str]]:
    """(level, text) of every Markdown heading of the file, in order; fenced code is skipped
    (a `# comment` in a code block is no heading)."""
    out, fenced = [], False
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            out.append((len(match.group(1)), match.group(2)))
    return out


@lru_cache(maxsize=1)
def sections() -> dict[str, str]:
    """English heading -> Spanish heading, for every section below the title; a ValueError
    says where the two outlines part."""
    english, spanish = headings(ENGLISH)[1:], headings(SPANISH)[1:]
    for i, ((level_en, en), (level_es, es)) in enumerate(zip(english, spanish)):
        if level_en != level_es:
            raise ValueError(f"the lesson's outlines part at heading {i + 2}: {en!r} is level "
                             f"{level_en} in {ENGLISH.name}, {es!r} level {level_es} in "
                             f"{SPANISH.name}")
    if len(english) != len(spanish):
        raise ValueError(f"{ENGLISH.name} has {len(english)} headings below its title, "
                         f"{SPANISH.name} {len(spanish)}: translate the missing ones")
    return dict(zip((en for _, en in english), (es for _, es in spanish)))


def parent(heading: str) -> str | None:
    """The heading the section `heading` sits under ("Techniques" for "1. Gradient checking"),
    or None for a top-level section."""
    outline = headings(ENGLISH)[1:]
    for i, (level, text) in enumerate(outline):
        if text == heading:
            return next((t for lv, t in reversed(outline[:i]) if lv < level and lv > 1), None)
    raise ValueError(f"the lesson has no section {heading!r}")


def spanish(heading: str) -> str:
    """The Spanish heading of the English section `heading`; a ValueError names the headings
    there are when it is not one."""
    found = sections()
    if heading not in found:
        raise ValueError(f"the lesson has no section {heading!r}; its sections: "
                         f"{'; '.join(found)}")
    return found[heading]


def table_rows(path: Path = ENGLISH) -> list[dict[str, str]]:
    """Every row of every Markdown table of the lesson text, as {column header: cell}."""
    rows, header = [], None
    for line in Path(path).read_text(encoding="utf-8").splitlines() + [""]:
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if header is None:
            header = cells
        elif not all(set(c) <= set("-: ") for c in cells):
            rows.append(dict(zip(header, cells)))
    return rows


def case_rows(family: str, name: str, path: Path = ENGLISH) -> list[dict[str, str]]:
    """The rows of the lesson's tables that link to the catalogue case `family/name`."""
    link = f"(../broken_models/{family}/{name}.py)"
    return [row for row in table_rows(path) if any(link in cell for cell in row.values())]
