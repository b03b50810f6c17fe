"""The lesson's demo: each broken network is caught with the right code, the healthy one is clean."""
from __future__ import annotations

import subprocess
import sys

import pytest

from lesson.course.cli import main
from lesson.course.demo import EXPECTED, demo_broken_networks


def test_demo_diagnoses_each_bug_and_leaves_the_healthy_net_clean():
    results = demo_broken_networks(verbose=False)
    assert set(results) == set(EXPECTED)
    for name, expected in EXPECTED.items():
        codes = [f.code for f in results[name]]
        if expected is None:
            assert codes == [], f"healthy network flagged: {codes}"
        else:
            assert expected in codes, f"{name}: expected {expected}, got {codes}"
    # the lesson's debugger was wrong on these three (issue 2, section 3)
    lr_codes = [f.code for f in results["lr_too_high"]]
    assert "NOT_DECREASING" not in lr_codes and "OSCILLATING" not in lr_codes
    assert "DEAD_NEURONS" not in [f.code for f in results["missing_zero_grad"]]


def test_nndebug_demo_quiet_exits_zero(capsys):
    assert main(["demo", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "missing_zero_grad: MISSING_ZERO_GRAD" in out and "healthy: no findings" in out


@pytest.mark.slow
def test_python_m_lesson_runs_the_demo():
    proc = subprocess.run([sys.executable, "-m", "lesson"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "SUMMARY" in proc.stdout and "UNEXPECTED" not in proc.stdout
    assert "Warning" not in proc.stderr
