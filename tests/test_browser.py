"""The student's path in a real browser: headless Chromium (Debian's `chromium`, driven by
Playwright) opens a released exercise in JupyterLab, runs it and presses nbgrader's Validate
button; and opens the report `nndebug clinic` writes and checks that every picture loads.

These tests need `/usr/bin/chromium` and the `playwright` package (the test extras); `.ci/run`
installs Chromium on a fresh machine. Playwright's own browser download is never used.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("NNDEBUG_CHROMIUM", "/usr/bin/chromium"))
#: The fastest exercise: its cells and its validation run in seconds on one core.
EXERCISE = Path("ex5_gradient_check") / "gradient_check.ipynb"
#: Chromium flags for a machine with no network and no sandboxing support (CI runs as root).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-gpu", "--disable-dev-shm-usage"]
#: Upper bound for one step in the UI (server start, run all cells, validate) on a busy CI core.
STEP_S = 180

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.is_file(),
                       reason=f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)"),
]
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="playwright is not installed (pip install -e '.[test]')")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One headless Chromium for the module, closed even when a test fails."""
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser, tmp_path) -> Iterator[object]:
    """A fresh tab with a tall window (every notebook cell rendered). Its last screen is kept
    as tmp_path/last-page.png: when a test fails, it shows what the student would have seen."""
    context = browser.new_context(viewport={"width": 1400, "height": 3000})
    tab = context.new_page()
    tab.set_default_timeout(STEP_S * 1000)
    try:
        yield tab
    finally:
        with contextlib.suppress(Exception):
            tab.screenshot(path=str(tmp_path / "last-page.png"))
        context.close()


# --- JupyterLab ----------------------------------------------------------------------------


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> bytes:
    """GET on loopback, never through a proxy set in the environment."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as response:
        return response.read()


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab: where it serves, its token, and the course folder it serves."""
    url: str
    token: str
    course: Path
    log: Path

    def tree(self, relative: Path) -> str:
        """The address that opens `relative` (a path inside the course) in JupyterLab, in a
        workspace of its own: no tab of an earlier notebook is restored next to it."""
        workspace = re.sub(r"[^A-Za-z0-9]+", "-", relative.as_posix())
        return f"{self.url}/lab/workspaces/{workspace}/tree/{relative.as_posix()}?token={self.token}"


def _copy_course(target: Path) -> Path:
    """The released exercise and the course's nbgrader_config.py in a fresh folder: the server
    runs there, so nbgrader's Validate reads the course's config and writes nothing here."""
    target.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", target)
    shutil.copytree(ROOT / "exercises" / EXERCISE.parent, target / "exercises" / EXERCISE.parent)
    return target


def _stop(process: subprocess.Popen) -> None:
    """End the server and its kernels (its process group): SIGTERM, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=20)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[Lab]:
    """JupyterLab on 127.0.0.1 with a token, in a temporary copy of the course; its own
    Jupyter config, runtime and settings folders, so nothing of the user's (or of a previous
    run) changes what the student sees. Stopped, kernels included, even when a test fails."""
    base = tmp_path_factory.mktemp("lab")
    course = _copy_course(base / "course")
    token = os.urandom(16).hex()
    port = _free_port()
    env = os.environ | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        "IPYTHONDIR": str(base / "ipython"),
        "OMP_NUM_THREADS": "1",
    }
    log = base / "jupyterlab.log"
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
               f"--port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={course}",
               "--ServerApp.allow_root=True", "--LabApp.news_url=None",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=course, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + STEP_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"JupyterLab exited with {process.returncode}:\n{log.read_text()}")
            try:
                json.loads(_get(f"{url}/api/status?token={token}"))
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer in {STEP_S} s:\n{log.read_text()}")
                time.sleep(0.5)
        yield Lab(url, token, course, log)
    finally:
        _stop(process)


def _filled_with_solutions(released: Path, solution: Path, target: Path) -> Path:
    """The released notebook with every answer cell replaced by the solution's answer (the
    solution markers dropped): what a student who solved it all would submit. The tests stay
    the released ones; hidden tests are not part of what a student sees."""
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source
               for c in nbformat.read(solution, as_version=4).cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    notebook = nbformat.read(released, as_version=4)
    filled = 0
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution") and grade_id in answers:
            cell.source = "\n".join(line for line in answers[grade_id].splitlines()
                                    if line.strip() not in ("### BEGIN SOLUTION",
                                                            "### END SOLUTION"))
            filled += 1
    assert filled, f"{released} has no answer cell that {solution} answers"
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    return target


def _run_all_cells(page, lab: Lab, notebook: Path) -> None:
    """Open `notebook` in JupyterLab and run it as a student does: Run > Run All Cells, then
    wait until a cell has run, none is waiting and the kernel is idle again."""
    page.goto(lab.tree(notebook))
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for()
    # the kernel is up (the status bar reads "Python 3 (ipykernel) | Idle"): Run All before it
    # is would ask which kernel to start
    page.locator("#jp-main-statusbar").filter(has_text=re.compile(r"\|\s*Idle")).wait_for()
    page.locator(".lm-MenuBar-itemLabel").filter(has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel").filter(has_text=re.compile(r"^Run All Cells$")).click()
    page.wait_for_function(
        """() => {
            const prompts = [...document.querySelectorAll('.jp-NotebookPanel .jp-InputPrompt')]
                .map(p => p.textContent);
            const kernel = document.querySelector('.jp-Notebook-ExecutionIndicator');
            return prompts.some(p => /\\[\\d+\\]/.test(p)) && !prompts.some(p => p.includes('*'))
                && kernel !== null && kernel.dataset.status === 'idle';
        }""", timeout=STEP_S * 1000)


def _validate(page) -> tuple[set[str], str]:
    """Press nbgrader's Validate button in the notebook toolbar; the result dialog's classes
    (`validation-success`, `validation-failed`, ...) and its text, after closing it."""
    page.locator(".jp-NotebookPanel-toolbar .validate-button").click()
    message = page.locator(".jp-Dialog #validation-message")
    message.wait_for(timeout=STEP_S * 1000)
    classes = set((message.get_attribute("class") or "").split())
    text = message.inner_text()
    page.locator(".jp-Dialog .jp-mod-accept").click()
    message.wait_for(state="detached")
    return classes, text


def _error_outputs(page) -> list[str]:
    """Tracebacks the student sees under the cells."""
    return page.locator(
        ".jp-NotebookPanel .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
    ).all_inner_texts()


def test_the_release_fails_validate_and_the_solved_notebook_passes(lab, page):
    released = Path("exercises") / EXERCISE
    _run_all_cells(page, lab, released)
    errors = _error_outputs(page)
    assert any("NotImplementedError" in e for e in errors), errors  # the stub the student sees
    classes, text = _validate(page)
    assert "validation-failed" in classes, (classes, text, lab.log.read_text()[-3000:])
    assert "NotImplementedError" in text and "Success" not in text, text

    solved = Path("student") / EXERCISE
    _filled_with_solutions(lab.course / released, ROOT / "solutions" / EXERCISE,
                           lab.course / solved)
    _run_all_cells(page, lab, solved)
    assert _error_outputs(page) == []
    assert page.locator(".jp-NotebookPanel .jp-OutputArea-output",
                        has_text="faulty parameter: 2.weight").count() == 1
    classes, text = _validate(page)
    assert "validation-success" in classes, (classes, text, lab.log.read_text()[-3000:])
    assert "Success! Your notebook passes all the tests." in text


# --- the clinic's report -------------------------------------------------------------------


def test_every_picture_of_the_clinic_report_loads_without_console_errors(page, tmp_path):
    out = tmp_path / "nndebug-report"
    run = subprocess.run([sys.executable, "-m", "lesson.course.cli", "clinic",
                          "--family", "backward", "--out", str(out), "--jobs", "1"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=STEP_S,
                         env=os.environ | {"OMP_NUM_THREADS": "1"})
    report = out / "index.html"
    assert report.is_file(), run.stdout + run.stderr
    pictures = sorted(out.rglob("*.png"))
    assert pictures, f"the clinic drew no picture:\n{run.stdout}"

    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed to load {r.url[:80]}"))
    page.goto(report.as_uri(), wait_until="load")
    images = page.eval_on_selector_all(
        "img", "els => els.map(i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth}))")
    assert len(images) >= len(pictures), (images, pictures)
    broken = [i for i in images if not (i["complete"] and i["width"] > 0)]
    assert not broken, broken
    assert not problems, problems
