"""benchmarks/bench_case_seeds.py keeps a result as long as the code that produced it."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_case_seeds import case_hashes, code_of, source_hashes  # noqa: E402

PAGE = '''"""A page."""
import torch

TITLE = "A title"
FIX = "A fix."
EXPECTED = ("LR_TOO_HIGH",)


def train_broken(seed):
    """Trains."""
    x = torch.zeros(3)  # a comment
    return x
'''


def _hash(tmp_path: Path, text: str) -> str:
    page = tmp_path / "page.py"
    page.write_text(text)
    return code_of(page)


def test_docstrings_comments_and_card_words_leave_the_code_as_it_was(tmp_path):
    base = _hash(tmp_path, PAGE)
    reworded = (PAGE.replace('"""A page."""', '"""Another page."""')
                .replace('"""Trains."""', '"""Trains a net."""')
                .replace("# a comment", "# another").replace("A title", "Better")
                .replace("A fix.", "Another fix."))
    assert _hash(tmp_path, reworded) == base
    assert "Trains" not in base and "A title" not in base


def test_a_changed_line_of_code_or_a_read_card_field_is_new_code(tmp_path):
    base = _hash(tmp_path, PAGE)
    assert _hash(tmp_path, PAGE.replace("zeros(3)", "zeros(4)")) != base
    assert _hash(tmp_path, PAGE.replace("LR_TOO_HIGH", "LR_TOO_LOW")) != base
    # a function whose body was only its docstring is still a function
    assert "def f():\n    pass" in _hash(tmp_path, 'def f():\n    """Nothing."""\n')


def test_a_case_s_hash_covers_its_page_and_the_shared_code(tmp_path):
    pages = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    shared = [tmp_path / "shared.py"]
    for path, text in [(pages["a"], "x = 1\n"), (pages["b"], "x = 2\n"), (shared[0], "y = 1\n")]:
        path.write_text(text)
    first = _hashes(pages, shared)
    assert first["a"] != first["b"]
    shared[0].write_text("y = 2\n")
    second = _hashes(pages, shared)
    assert second["a"] != first["a"] and second["b"] != first["b"]
    pages["a"].write_text("x = 1  # the same code\n")
    assert _hashes(pages, shared)["a"] == second["a"]


def _hashes(pages, shared):
    return source_hashes(pages, shared, root=next(iter(pages.values())).parent)


def test_every_case_has_a_hash():
    from broken_models import CATALOGUE

    hashes = case_hashes()
    assert set(hashes) == set(CATALOGUE) and len(set(hashes.values())) == len(CATALOGUE)
