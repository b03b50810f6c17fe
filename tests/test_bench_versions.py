"""benchmarks/bench_versions.py loads a git revision's debugger beside the working tree's."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None
    or subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                      capture_output=True).returncode != 0,
    reason="needs git and a repository with a commit")


def test_a_revision_s_debugger_runs_on_its_own_modules(tmp_path: Path) -> None:
    from bench_versions import debugger_at
    from workload import train_steps

    import lesson.debugger.engine
    from lesson.debugger.monitor import NetworkDebugger
    old = debugger_at("HEAD", tmp_path)
    assert old is not NetworkDebugger
    assert old.__module__ == "lesson_at_HEAD.debugger.monitor"
    # its base class comes from the revision's engine, not the working tree's
    assert sys.modules["lesson_at_HEAD.debugger.engine"] is not lesson.debugger.engine
    assert not issubclass(old, lesson.debugger.engine.Engine)
    assert sys.modules["lesson_at_HEAD"].NetworkDebugger is old    # its lazy names too
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    with old(model, opt) as dbg:
        train_steps(model, opt, nn.functional.cross_entropy, x, y, dbg, 12)
        assert len(dbg.loss_history) == 12
        assert [r["step"] for r in dbg.history] == list(range(10))   # the warm-up


def test_an_unknown_revision_is_refused_with_the_reason(tmp_path: Path) -> None:
    from bench_versions import debugger_at
    with pytest.raises(SystemExit, match="cannot read lesson/ at 'no-such-revision'"):
        debugger_at("no-such-revision", tmp_path)


def test_a_revision_without_the_debugger_s_layout_is_refused(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    import bench_versions
    repo = tmp_path / "repo"
    (repo / "lesson").mkdir(parents=True)
    (repo / "lesson" / "__init__.py").write_text("")
    (repo / "lesson" / "monitor.py").write_text("class NetworkDebugger: ...\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "old layout"], check=True)
    monkeypatch.setattr(bench_versions, "ROOT", repo)
    with pytest.raises(SystemExit, match="no NetworkDebugger in lesson/debugger/monitor.py"):
        bench_versions.debugger_at("HEAD~0", tmp_path / "out")
