"""Keep the lesson's two artifacts in step with the code vocabulary.

`outputs/prompt-nn-debugger.md` and `outputs/skill-debug-checklist.md` are written by hand,
except for sections between markers like these:

    <!-- BEGIN GENERATED codes: ... -->
    ...
    <!-- END GENERATED codes -->

Those sections are rendered here from `lesson.findings.CODES` and `lesson.course.decision_tree.TREE`,
the one source of truth. After changing either, run `python -m lesson.course.artifacts`;
`python -m lesson.course.artifacts --check` exits 1 when a committed file is stale (a test runs it).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Callable

from lesson.course.decision_tree import TREE, Node
from lesson.findings import AREAS, CODES, TOOLS

#: The repository's outputs/ folder, where the two artifacts live.
OUTPUTS = Path(__file__).resolve().parents[2] / "outputs"
PROMPT = "prompt-nn-debugger.md"
SKILL = "skill-debug-checklist.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_codes_table() -> str:
    """Every code, grouped by area, with meaning, fix and the tool that reveals it."""
    lines = ["| code | area | meaning | fix | found by |", "|---|---|---|---|---|"]
    for code in CODES.values():
        lines.append(f"| `{code.name}` | {code.area} | {_cell(code.meaning)} | {_cell(code.fix)} "
                     f"| `{code.tool}` |")
    return "\n".join(lines)


def render_codes_by_area() -> str:
    """The checklist's reference: one entry per code, under its area, meaning then fix."""
    lines: list[str] = []
    for area, what in AREAS.items():
        codes = [c for c in CODES.values() if c.area == area]
        if not codes:
            continue
        lines += [f"#### {area}: {what}", ""]
        for c in codes:
            lines.append(f"- `{c.name}` ({c.severity.name.lower()}, found by `{c.tool}`): "
                         f"{c.meaning} **Fix:** {c.fix}")
        lines.append("")
    return "\n".join(lines).rstrip()


def render_tools() -> str:
    """Which call runs each tool named in the tables."""
    return "\n".join(f"- `{name}`: `{call}`" for name, call in TOOLS.items())


def _render_node(node: Node, depth: int) -> list[str]:
    pad = "  " * depth
    if node.code:
        return [f"{pad}- {node.text} → **`{node.code}`**. Fix: {CODES[node.code].fix}"]
    if node.action:
        return [f"{pad}- {node.text} → **Action:** {node.action}"]
    lines = [f"{pad}- {node.text}:"]
    for child in node.children:
        lines += _render_node(child, depth + 1)
    return lines


def render_tree() -> str:
    """The decision tree as nested lists, one heading per symptom."""
    lines: list[str] = []
    for i, root in enumerate(TREE, 1):
        lines += [f"### {i}. {root.text}", ""]
        for child in root.children:
            lines += _render_node(child, 0)
        lines.append("")
    return "\n".join(lines).rstrip()


#: file -> section name -> renderer
SECTIONS: dict[str, dict[str, Callable[[], str]]] = {
    PROMPT: {"codes": render_codes_table, "tools": render_tools},
    SKILL: {"tree": render_tree, "codes": render_codes_by_area, "tools": render_tools},
}

_BLOCK = re.compile(r"(<!-- BEGIN GENERATED (?P<name>[\w-]+)[^>]*-->\n)(?P<body>.*?)"
                    r"(<!-- END GENERATED (?P=name) -->)", re.S)


def regenerate(text: str, renderers: dict[str, Callable[[], str]]) -> str:
    """Replace the body of every marked section of `text` with its renderer's output."""
    seen: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in renderers:
            raise ValueError(f"no renderer for generated section {name!r}")
        seen.add(name)
        return f"{match[1]}{renderers[name]()}\n{match[4]}"

    out = _BLOCK.sub(replace, text)
    missing = set(renderers) - seen
    if missing:
        raise ValueError(f"markers missing for generated sections: {', '.join(sorted(missing))}")
    return out


def stale(folder: Path = OUTPUTS) -> list[Path]:
    """The artifacts whose generated sections differ from what the code says now."""
    return [folder / name for name, renderers in SECTIONS.items()
            if (text := (folder / name).read_text(encoding="utf-8")) != regenerate(text, renderers)]


def write(folder: Path = OUTPUTS) -> list[Path]:
    """Regenerate the marked sections in place; return the files that changed."""
    changed = []
    for name, renderers in SECTIONS.items():
        path = folder / name
        text = path.read_text(encoding="utf-8")
        new = regenerate(text, renderers)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lesson.course.artifacts", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    parser.add_argument("--dir", type=Path, default=OUTPUTS, help="folder holding the artifacts")
    args = parser.parse_args(argv)
    if args.check:
        old = stale(args.dir)
        for path in old:
            print(f"stale: {path} (run python -m lesson.course.artifacts)", file=sys.stderr)
        return 1 if old else 0
    for path in write(args.dir):
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
