"""A class graded two ways, side by side in one run: plain serial `nbgrader autograde` (the
student's kernel executes the notebook, nbgrader's own Execute) against
`nndebug grade --workers 2` (Dask, clean-room verdicts included). Same grades for every
student who does not tamper; prints the time ratio (target <= 0.6 on 2 cores).

    python benchmarks/bench_class_grading.py
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lesson.course.grading import gradebook as gbk  # noqa: E402
from lesson.course.grading.simulated import TAMPERING, submissions  # noqa: E402
from lesson.course.learner.classroom import copy_course, generate_release, nbgrader, submit  # noqa: E402

KERNEL_EXECUTE = '''
c.Autograde.autograde_preprocessors = [
    "nbgrader.preprocessors.Execute", "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor", "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades", "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata"]
'''


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="nndebug-bench-"))
    template = copy_course(ROOT, base / "template")
    generate_release(template)
    roots = {}
    for path in ("plain", "nndebug"):
        root = base / path
        shutil.copytree(template, root)
        subs = submissions(ROOT / "solutions", root, base / "drafts" / path,
                           models=[f"model{i}" for i in range(4)])
        for (student, assignment), nb in subs.items():
            submit(root, student, assignment, nb)
        roots[path] = root
    with (roots["plain"] / "nbgrader_config.py").open("a") as f:
        f.write(KERNEL_EXECUTE)
    print(f"{len(subs)} submissions over 3 assignments")
    start = time.perf_counter()
    nbgrader(roots["plain"], "autograde", "*", "--force", check=False)   # the exiter kills its kernel
    plain = time.perf_counter() - start
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from lesson.course.cli import main; "
                    "sys.exit(main())", "grade", "--workers", "2", "--no-progress"],
                   cwd=roots["nndebug"], env=env, check=True, capture_output=True)
    ours = time.perf_counter() - start
    tamperers = {s for s, _, _ in TAMPERING.values()}
    a, b = (gbk.scores(gbk.db_url(roots[p], None)) for p in ("plain", "nndebug"))
    same = all(a[k] == b[k] for k in a if k[0] not in tamperers)
    print(f"plain nbgrader autograde (serial, kernel): {plain:.1f} s")
    print(f"nndebug grade --workers 2 (clean room):    {ours:.1f} s")
    print(f"same grades for honest students: {same}")
    print(f"ratio: {ours / plain:.2f} (target <= 0.6)")
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
