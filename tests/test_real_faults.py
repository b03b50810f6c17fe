"""The real-fault benchmark's targets hold (issue: the debugger on faults it was not built for):
every reproduction shows its symptom broken and not fixed, no fixed twin gets a finding, and the
diagnosed and localised shares stay above their targets. A change of the debugger that brings a
false alarm on a fixed twin fails here, not only in the benchmark's printout.

The whole sweep (`bench_real_faults.py --seeds 0-19`) is too slow for the suite; it holds seed 0
(`make test`) and seed 7 (`make test-seeds`: a GAN's fixed twin once got DOUBLE_SOFTMAX there), each (fault, seed) of the sweep
that once went wrong, and the sweep's machinery on two fast faults: seeds parsed, runs cached
and resumed, a changed source run again, the report."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_real_faults as bench  # noqa: E402
from bench_real_faults import judge, parse_seeds, report_sweep, sweep  # noqa: E402
from real_faults import FAULTS  # noqa: E402

FAST = ["m_layers_in_python_list", "tr_zero_grad_between_backward_step"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, pytest.param(7, marks=pytest.mark.seeds)])
def test_the_benchmark_meets_its_targets(seed):
    rows = [judge(f, seed) for f in FAULTS.values()]
    assert [r["name"] for r in rows if not r["reproduced"]] == []
    assert {r["name"]: r["fixed_found"] for r in rows if r["fixed_found"]} == {}
    blamed = [r for r in rows if FAULTS[r["name"]].blame]
    assert len(rows) >= 50
    assert sum(r["diagnosed"] for r in rows) >= 0.8 * len(rows)
    assert sum(r["localised"] for r in blamed) >= 0.6 * len(blamed)


#: (fault, seed) where a sweep of seeds 0-19 found a fixed twin with findings or a broken run
#: not reproduced, before the debugger or the reproduction was mended (README's real-fault
#: paragraph says which, and why; a mended reproduction says so in its fault file)
ONCE_WRONG = [("tr_gan_generator_detach", 6), ("tr_gan_generator_detach", 8),
              ("tr_gan_generator_detach", 12), ("tr_gan_generator_detach", 16),
              ("m_constant_init_conv", 6), ("t_nan_in_features", 16),
              ("tr_norm_of_zero_vector", 19), ("m_relu_output_regression", 5),
              ("tr_clip_after_step", 5), ("tr_bce_with_logits_on_sigmoid", 3),
              ("seq_lm_head_copied_not_tied", 11), ("seq_lm_head_copied_not_tied", 13),
              ("seq_encoder_batch_first_missing", 11), ("seq_masked_bias_too_weak", 3)]


@pytest.mark.slow
@pytest.mark.parametrize("name, seed", ONCE_WRONG)
def test_the_seeds_that_once_went_wrong(name, seed):
    row = judge(FAULTS[name], seed)
    assert row["reproduced"] and row["diagnosed"]
    assert row["fixed_found"] == []


def test_the_cache_key_holds_every_library_module_a_run_imports():
    """Results are keyed by the protocol's sources only (the LR finder or the course can
    change without rerunning the sweep): every lesson module two runs import, in a fresh
    interpreter, must be among them."""
    code = ("import sys; sys.path[:0] = ['benchmarks', '.']\n"
            "import bench_real_faults as b\n"
            f"for name in {FAST!r} + ['tr_nll_on_logits']:\n"
            "    b.judge(b.FAULTS[name], 0)\n"
            "print('\\n'.join(m.__file__ for n, m in sys.modules.items()\n"
            "                 if n.split('.')[0] == 'lesson' and getattr(m, '__file__', None)))")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                         text=True, check=True).stdout.split()
    imported = {Path(f).resolve() for f in out}
    assert imported and imported <= {p.resolve() for p in bench._shared_sources()}
    assert not any("lr_finder" in str(p) for p in bench._shared_sources())


def test_seeds_are_ranges_and_lists():
    assert parse_seeds("0-19") == list(range(20))
    assert parse_seeds("0,3,7") == [0, 3, 7]
    assert parse_seeds("0-2, 2, 9") == [0, 1, 2, 9]
    for bad in ("", "a-3", "5-2", "1,,2"):
        with pytest.raises(ValueError, match="seeds"):
            parse_seeds(bad)


def test_the_sweep_caches_resumes_and_reruns_a_changed_source(tmp_path, monkeypatch):
    cache = tmp_path / "runs.jsonl"
    rows = sweep(FAST, [0, 1], jobs=1, cache=cache, progress=False)
    assert [(r["name"], r["seed"]) for r in rows] == [(n, s) for s in (0, 1) for n in FAST]
    assert all(r["reproduced"] and r["diagnosed"] and not r["fixed_found"] for r in rows)
    assert len(cache.read_text().splitlines()) == 4

    def no_run(*args):
        raise AssertionError("a cached run was run again")
    monkeypatch.setattr(bench, "judge", no_run)
    with cache.open("a") as fh:
        fh.write('{"name": "cut sh')          # an interrupted run's last line: ignored
    assert sweep(FAST, [1, 0], jobs=1, cache=cache, progress=False) == \
        [r for s in (1, 0) for r in rows if r["seed"] == s]

    ran = []
    monkeypatch.setattr(bench, "judge", lambda fault, seed: ran.append((fault.name, seed))
                        or dict(rows[0], name=fault.name, seed=seed))
    monkeypatch.setattr(bench, "fingerprint",
                        lambda fault: "changed" if fault.name == FAST[0] else
                        json.loads(cache.read_text().splitlines()[1])["fingerprint"])
    sweep(FAST, [0, 1], jobs=1, cache=cache, progress=False)
    assert ran == [(FAST[0], 0), (FAST[0], 1)]     # only the changed source runs again


def test_the_report_names_each_seed_that_went_wrong(capsys):
    base = {"group": "training", "reproduced": True, "diagnosed": True, "localised": False,
            "symptom_broken": True, "symptom_fixed": False, "found": [], "fixed_found": [],
            "layers": [], "seconds": 1.0}
    rows = [dict(base, name=n, seed=s) for s in range(3) for n in FAST]
    rows[3] = dict(rows[3], fixed_found=["DOUBLE_SOFTMAX"])          # FAST[1], seed 1
    rows[4] = dict(rows[4], diagnosed=False)                         # FAST[0], seed 2
    assert report_sweep(rows, [0, 1, 2]) is False
    out = capsys.readouterr().out
    assert f"{FAST[1]}: fixed twin with findings on 1 DOUBLE_SOFTMAX" in out
    assert f"{FAST[0]}: missed on seed 2" in out
    assert "no fixed twin with a finding on any seed: NO" in out
    assert "diagnosed >= 80% on every seed: NO (lowest 50%, seed 2)" in out
    rows[3] = dict(rows[3], fixed_found=[])
    rows[4] = dict(rows[4], diagnosed=True)
    assert report_sweep(rows, [0, 1, 2]) is True
