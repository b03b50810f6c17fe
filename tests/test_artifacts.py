"""The two artifacts in outputs/ stay true to the code vocabulary (lesson.findings.CODES)."""
from __future__ import annotations

import re
import shutil

import pytest

from lesson.course import artifacts
from lesson.course.decision_tree import TREE, Node, codes_in_tree, leaves
from lesson.findings import CODES, Code, Severity

PROMPT = artifacts.OUTPUTS / artifacts.PROMPT
SKILL = artifacts.OUTPUTS / artifacts.SKILL
UPPER_SNAKE = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")


def front_matter(path) -> dict:
    """The `key: value` lines between the opening `---` lines (numbers and [lists] parsed)."""
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n"), f"{path.name} has no front matter"
    meta = {}
    for line in text.split("---\n", 2)[1].splitlines():
        key, sep, value = line.partition(": ")
        assert sep and re.fullmatch(r"[a-z_]+", key), f"bad front matter line {line!r}"
        value = value.strip()
        if value.startswith("["):
            meta[key] = [v.strip() for v in value.strip("[]").split(",")]
        else:
            meta[key] = int(value) if value.isdigit() else value
    return meta


def section(text: str, name: str) -> str:
    match = re.search(rf"<!-- BEGIN GENERATED {name}\b.*?-->\n(.*?)<!-- END GENERATED {name} -->",
                      text, re.S)
    assert match, f"generated section {name!r} missing"
    return match[1]


def test_committed_artifacts_equal_the_generated_text():
    assert artifacts.stale() == [], "run: python -m lesson.course.artifacts"
    assert artifacts.main(["--check"]) == 0


def test_front_matter():
    prompt, skill = front_matter(PROMPT), front_matter(SKILL)
    for meta in (prompt, skill):
        assert meta["phase"] == 3 and meta["lesson"] == 13
        assert meta["name"] and len(meta["description"]) > 40
    assert skill["version"] and isinstance(skill["tags"], list) and len(skill["tags"]) >= 3


def test_every_code_appears_in_the_checklist_with_its_fix():
    reference = section(SKILL.read_text(encoding="utf-8"), "codes")
    for name, code in CODES.items():
        lines = [ln for ln in reference.splitlines() if f"`{name}`" in ln]
        assert len(lines) == 1, name
        assert code.fix in lines[0] and code.meaning in lines[0], name


def test_every_code_is_reachable_in_the_decision_tree():
    assert codes_in_tree() == set(CODES)


def test_every_branch_of_the_rendered_tree_ends_at_a_code_or_an_action():
    tree = section(SKILL.read_text(encoding="utf-8"), "tree")
    items = [(len(m[1]), m[2]) for m in re.finditer(r"^( *)- (.*)$", tree, re.M)]
    assert len(items) > 40
    leaf_count = 0
    for i, (indent, text) in enumerate(items):
        is_leaf = i + 1 == len(items) or items[i + 1][0] <= indent
        if not is_leaf:
            assert text.endswith(":"), text
            continue
        leaf_count += 1
        code = re.search(r"→ \*\*`([A-Z_]+)`\*\*\. Fix: (.+)$", text)
        if code:
            assert code[1] in CODES and code[2] == CODES[code[1]].fix
        else:
            assert re.search(r"→ \*\*Action:\*\* \S", text), f"branch ends nowhere: {text}"
    assert leaf_count == len(list(leaves()))
    assert len(re.findall(r"^### \d+\. ", tree, re.M)) == len(TREE)


@pytest.mark.parametrize("path", [PROMPT, SKILL], ids=lambda p: p.name)
def test_no_unknown_code_is_named(path):
    unknown = set(UPPER_SNAKE.findall(path.read_text(encoding="utf-8"))) - set(CODES)
    assert not unknown


def test_prompt_has_input_protocol_output_format_and_patterns():
    text = PROMPT.read_text(encoding="utf-8")
    for heading in ("## What you will be given", "## Diagnostic protocol", "## Output format",
                    "## Common patterns", "## Diagnosis codes"):
        assert heading in text
    for field in ("Symptom:", "Diagnosis:", "Evidence:", "Fix:", "Verify:"):
        assert field in text
    for kind in ("debugger report", "Loss curves", "Code"):
        assert kind in text
    table = section(text, "codes")
    assert all(f"| `{name}` |" in table for name in CODES)


def test_a_new_code_makes_the_committed_files_stale(monkeypatch, tmp_path):
    for name in artifacts.SECTIONS:
        shutil.copy(artifacts.OUTPUTS / name, tmp_path / name)
    monkeypatch.setitem(CODES, "TEST_ONLY_CODE", Code(
        "TEST_ONLY_CODE", "A code added by a test.", "Remove the test code.", Severity.INFO,
        "data", "monitor"))
    assert sorted(p.name for p in artifacts.stale(tmp_path)) == sorted(artifacts.SECTIONS)
    artifacts.write(tmp_path)
    assert "`TEST_ONLY_CODE`" in (tmp_path / artifacts.SKILL).read_text(encoding="utf-8")
    assert artifacts.stale(tmp_path) == []


def test_regenerate_refuses_missing_or_unknown_sections():
    with pytest.raises(ValueError, match="markers missing"):
        artifacts.regenerate("no markers here", {"codes": lambda: "x"})
    text = "<!-- BEGIN GENERATED nope: x -->\nold\n<!-- END GENERATED nope -->"
    with pytest.raises(ValueError, match="no renderer"):
        artifacts.regenerate(text, {})
    text = "<!-- BEGIN GENERATED codes: x -->\nold\n<!-- END GENERATED codes -->"
    assert "new" in artifacts.regenerate(text, {"codes": lambda: "new"})


def test_tree_nodes_reject_dead_ends_and_unknown_codes():
    with pytest.raises(ValueError, match="must end"):
        Node("a leaf going nowhere")
    with pytest.raises(ValueError, match="unknown diagnosis code"):
        Node("a leaf", code="NOT_A_CODE")
    with pytest.raises(ValueError, match="cannot also"):
        Node("both", children=(Node("x", code="NAN_OR_INF"),), code="NAN_OR_INF")
