"""The lesson's text (English and Spanish): its code runs, its links resolve, its tables agree with
the catalogue and the codes, and it corrects the source lesson's slips instead of repeating them."""
from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

import pytest

from lesson import check_causality as lesson_check_causality
from lesson.findings import CODES

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "lesson"
READMES = [LESSON / "README.md", LESSON / "README.es.md"]
SEED = ROOT.parent / "shared" / "seed" / "000_b55e38a2aa10e6b2.txt"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
CASE_LINK = re.compile(r"\]\(\.\./broken_models/(\w+)/(\w+)\.py\)")
UPPER_SNAKE = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
ids = [p.name for p in READMES]


def text_of(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def python_blocks(text: str) -> list[str]:
    """Blocks fenced as ```python run; any other info string (```python slow, ```text) not."""
    return [m[2] for m in FENCE.finditer(text) if m[1].strip() == "python"]


def tables(text: str) -> list[list[list[str]]]:
    """Each Markdown table whose header ends with a `case` column, as rows of cells."""
    found, rows = [], None
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if rows is None:
                rows = [] if cells[-1] in ("case", "caso") else None
                header = True
                continue
            if header:
                header = False
                continue
            rows.append(cells)
        elif rows is not None:
            found.append(rows)
            rows = None
    return found


@pytest.mark.parametrize("path", READMES, ids=ids)
def test_every_code_block_runs(path, tmp_path, monkeypatch):
    blocks = python_blocks(text_of(path))
    assert len(blocks) >= 8
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, block in enumerate(blocks):
            try:
                exec(compile(block, f"{path.name}[block {i}]", "exec"), namespace)
            except Exception as err:   # say which block broke
                raise AssertionError(f"{path.name}, code block {i} failed: {err!r}\n{block}") from err
    printed = out.getvalue()
    assert "LR_TOO_HIGH" in printed                 # the lr=10 example is diagnosed
    assert namespace["result"]                      # a healthy model overfits one batch
    assert namespace["report"].passed               # the gradient check passes
    assert namespace["checks"].passed               # the preflight passes a healthy model
    assert "# The run to diagnose" in namespace["prompt"]
    # the sequence section shows what it says: a leak below the floor, a copier, the two checks
    assert namespace["watcher"].loss_history[-1] < namespace["floor"] - 0.3   # no mask: too good
    assert [f.code for f in namespace["copier"].diagnose()] == ["TARGETS_NOT_SHIFTED"]
    assert [f.code for f in namespace["twice"].diagnose()] == ["TARGETS_NOT_SHIFTED"]
    assert namespace["leak"][0].code == "CAUSAL_LEAK"
    assert lesson_check_causality(namespace["healthy"], namespace["sample"](4, 16)) == []
    assert "CAUSAL_LEAK" in printed and "BATCH_MIXING" in printed


@pytest.mark.parametrize("path", READMES, ids=ids)
def test_relative_links_resolve(path):
    text = text_of(path)
    slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-")
             for h in re.findall(r"^#+ (.+)$", text, re.M)}
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://")):
            continue
        file, _, anchor = target.partition("#")
        if file:
            assert (path.parent / file).exists(), f"{path.name}: broken link {target}"
        elif anchor:
            assert anchor in slugs, f"{path.name}: no heading for #{anchor}"


@pytest.mark.parametrize("path", READMES, ids=ids)
def test_table_rows_link_to_a_catalogue_case_that_shows_their_code(path):
    from broken_models import CATALOGUE

    found = tables(text_of(path))
    assert len(found) == 2, "the common-bugs table and the master table"
    linked = set()
    for rows in found:
        assert len(rows) >= 14
        for cells in rows:
            assert len(cells) == 5, cells
            code = cells[3].strip("`")
            assert code in CODES, cells
            match = CASE_LINK.search(cells[4])
            assert match, f"no case link in {cells}"
            family, name = match.groups()
            assert (ROOT / "broken_models" / family / f"{name}.py").is_file()
            case = CATALOGUE[name]
            assert case.family == family
            assert code in case.expected + case.secondary, (name, code)
            linked.add(name)
    missing = set(CATALOGUE) - linked
    assert not missing, f"catalogue cases no table row shows: {sorted(missing)}"


def test_both_languages_have_the_same_tables():
    en, es = (tables(text_of(p)) for p in READMES)
    key = lambda ts: [[(r[3], r[4]) for r in rows] for rows in ts]  # noqa: E731
    assert key(en) == key(es)


@pytest.mark.parametrize("path", READMES, ids=ids)
def test_no_unknown_code_is_named(path):
    assert set(UPPER_SNAKE.findall(text_of(path))) <= set(CODES)


@pytest.mark.parametrize("path", READMES, ids=ids)
def test_covers_concepts_techniques_exercises_and_key_terms(path):
    text = text_of(path)
    headings = re.findall(r"^#{2,3} (.+)$", text, re.M)
    assert len(headings) >= 20
    exercises = text.split("\n## ")[[h.split("\n")[0] for h in text.split("\n## ")].index(
        "Exercises" if path.suffixes == [".md"] else "Ejercicios")]
    assert len(re.findall(r"^\d\. \*\*", exercises, re.M)) == 5
    terms = re.split(r"\n## (?:Key terms|Términos clave)\n", text)[1].split("\n## ")[0]
    assert len(re.findall(r"^- \*\*", terms, re.M)) >= 12


@pytest.mark.parametrize("path", READMES, ids=ids)
def test_corrects_the_source_lessons_slips(path):
    text = text_of(path)
    corrections = re.split(r"\n## (?:Where this text differs|En qué se aparta)[^\n]*\n", text)
    assert len(corrections) == 2, "a section lists the corrections"
    body, fixes = corrections[0], corrections[1].split("\n## ")[0]
    # the unsourced figure is named only where it is corrected
    assert not re.search(r"60\s*(-|y el|a)\s*70", body) and re.search(r"60\s*(-|y el)\s*70", fixes)
    # Karpathy's post: what it does say, and the misattributed sentence called out
    assert '"fails silently"' in text
    assert "Recipe for Training Neural Networks" in fixes
    # Northcutt et al. (2021): the paper's own numbers, not 5-10%
    assert re.search(r"3[.,]3\s*%", body) and re.search(r"6\s*%", body) and "ImageNet" in body
    assert not re.search(r"5\s*(-|y el)\s*10\s*%", body)


@pytest.mark.parametrize("path", READMES, ids=ids)
def test_written_in_the_courses_own_words(path):
    """No run of 8 words from the source lesson's prose reappears (code, the corrections that
    quote it and the reading list's paper titles excepted)."""
    words = lambda t: re.findall(r"[a-záéíóúñü]+", t.lower())  # noqa: E731
    if not SEED.exists():  # the source lesson lies beside the checkout (../shared), not in it
        pytest.skip(f"source lesson not found at {SEED}")
    seed = words(SEED.read_text(encoding="utf-8"))
    shingles = {tuple(seed[i:i + 8]) for i in range(len(seed) - 7)}
    prose = re.split(r"\n## (?:Where this text differs|En qué se aparta)", text_of(path))[0]
    ours = words(FENCE.sub("", prose))
    copied = [" ".join(ours[i:i + 8]) for i in range(len(ours) - 7)
              if tuple(ours[i:i + 8]) in shingles]
    assert not copied, copied[:5]


SEQUENCE_HEADINGS = {"README.md": "Sequence models and language models",
                     "README.es.md": "Modelos de secuencia y de lenguaje"}


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every heading outside code blocks, in order."""
    return [(len(m[1]), m[2]) for m in re.finditer(r"^(#+) (.+)$", FENCE.sub("", text), re.M)]


def section(text: str, title: str) -> str:
    """The body of the level-2 section `title`, up to the next level-2 heading."""
    parts = re.split(r"^## ", text, flags=re.M)
    bodies = [p for p in parts if p.split("\n", 1)[0].strip() == title]
    assert len(bodies) == 1, f"no single section {title!r}"
    return bodies[0]


def test_both_languages_have_the_same_structure():
    """Same heading levels in the same order, as many code blocks, and the sequence section
    under its exact title in each (the catalogue's sequence cases name it)."""
    en, es = (text_of(p) for p in READMES)
    assert [lvl for lvl, _ in headings(en)] == [lvl for lvl, _ in headings(es)]
    assert len(python_blocks(en)) == len(python_blocks(es))
    for path in READMES:
        title = SEQUENCE_HEADINGS[path.name]
        assert (2, title) in headings(text_of(path)), f"{path.name}: no '## {title}'"
    position = [[t for _, t in headings(text)].index(SEQUENCE_HEADINGS[p.name])
                for p, text in zip(READMES, (en, es))]
    assert position[0] == position[1]


def test_every_lesson_section_a_case_names_is_a_heading_of_the_lesson():
    """A hint says "start from the lesson's section X": X must be findable in lesson/README.md.
    "Symptom N: ..." and "Technique N: ..." name the numbered headings of Concepts and
    Techniques; any other section is a heading, word for word."""
    from broken_models import CATALOGUE

    titles = [t for _, t in headings(text_of(LESSON / "README.md"))]
    techniques = section(text_of(LESSON / "README.md"), "Techniques")
    for name, case in CATALOGUE.items():
        numbered = re.match(r"(Symptom|Technique) (\d+): ", case.lesson)
        if numbered is None:
            assert case.lesson in titles, (name, case.lesson)
        elif numbered[1] == "Symptom":
            assert any(t.startswith(f"Symptom {numbered[2]}: ") for t in titles), (name, case.lesson)
        else:
            assert re.search(rf"^### {numbered[2]}\. ", techniques, re.M), (name, case.lesson)


@pytest.mark.parametrize("path", READMES, ids=ids)
def test_every_sequence_case_is_taught_and_in_the_master_table(path):
    """Each case of the sequence family is linked from the lesson's sequence section, with the
    code it shows, and has a row of the master table (the last table of the lesson)."""
    from broken_models import CATALOGUE

    text = text_of(path)
    body = section(text, SEQUENCE_HEADINGS[path.name])
    master = tables(text)[-1]
    in_master = {CASE_LINK.search(cells[4]).group(2) for cells in master}
    cases = {n: c for n, c in CATALOGUE.items() if c.family == "sequence"}
    assert len(cases) >= 12
    taught = set(CASE_LINK.findall(body))
    for name, case in cases.items():
        assert ("sequence", name) in taught, f"{path.name}: the sequence section never links {name}"
        assert name in in_master, f"{path.name}: no master-table row for {name}"
        assert any(f"`{code}`" in body for code in case.expected), (name, case.expected)
    # every new code is taught in the section, with the code the debugger reports
    for code in ("CAUSAL_LEAK", "TARGETS_NOT_SHIFTED", "PADDING_IN_LOSS", "PADDING_MASK_INVERTED",
                 "ATTENTION_ON_PADDING", "ATTENTION_SATURATED", "PADDED_POSITION_READ",
                 "ACCUMULATION_UNWEIGHTED_MEAN", "WARMUP_MISSING", "UNTIED_WEIGHTS",
                 "GENERATION_ON_PADDING", "BATCH_MIXING"):
        assert f"`{code}`" in body, f"{path.name}: {code} not in the sequence section"


@pytest.mark.parametrize("path", READMES, ids=ids)
def test_the_sequence_section_cites_the_public_reports(path):
    body = section(text_of(path), SEQUENCE_HEADINGS[path.name])
    for report in ("huggingface/transformers#48745", "#31673", "#22001", "karpathy/minGPT#75",
                   "karpathy/nanoGPT#331", "keras-team/keras#23038", "#21284",
                   "tatp22/linformer-pytorch#25", "EleutherAI/gpt-neo#45", "01-ai/Yi#110",
                   "allenai/open-instruct#632", "PR #34191", "#27517"):
        assert report in body, f"{path.name}: {report} not cited"
