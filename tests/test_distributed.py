"""The debugger across processes: the right reduction per statistic, rank 0 writes, and no
collective is left waiting. One launch of 2 gloo processes runs every scenario (spawning costs
more than the scenarios themselves); the test functions check what each rank saved."""
from __future__ import annotations

import math
import socket
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.algorithms.join import Join

from lesson.debugger.distributed import RankReducer, averaged_mask, is_main_process, world_size

STAT_KEYS = ("act_mean", "act_std", "act_min", "act_max", "zero_fraction", "dead_fraction",
             "sample_std")
PARAM_KEYS = ("grad_norm", "weight_norm", "update_ratio")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- what each rank runs ---------------------------------------------------------------------------

def reducer_scenarios(rank: int) -> dict:
    """RankReducer alone: the operations, a layout mismatch, and a rank that joins early."""
    reducer = RankReducer()
    result: dict = {"world": world_size(), "main": is_main_process()}
    # agreeing layouts: sums add up, averaged kinds are averaged, maxima are maxima
    sums = torch.tensor([1.0 + rank, 10.0 * (rank + 1), 4.0], dtype=torch.float64)
    mask = averaged_mask(["act", "grad"], [2, 1], sums.device)
    maxes = torch.tensor([float(rank), -5.0 - rank, 0.0 if rank else 1.0], dtype=torch.float64)
    result["agree"] = reducer(sums, maxes, averaged=mask, step=0, layout=7)
    result["agree_skipped"] = reducer.last_skipped
    # rank 1 measured one layer fewer: nobody reduces, nobody waits
    local = torch.arange(3 if rank == 0 else 2, dtype=torch.float64) + 100 * rank
    result["disagree"] = reducer(local, torch.zeros(1, dtype=torch.float64), step=20,
                                 layout=rank)
    result["disagree_skipped"] = reducer.last_skipped
    # and the next step reduces normally again
    result["after"] = reducer(torch.ones(2, dtype=torch.float64),
                              torch.full((1,), float(rank), dtype=torch.float64), step=40,
                              layout=1)
    # uneven inputs: rank 1 runs out after 2 of 5 steps and shadows the rest inside Join
    reducer = RankReducer(is_stats_step=lambda s: s % 2 == 0)
    seen = []
    with Join([reducer]):
        for step in range(5 if rank == 0 else 2):
            Join.notify_join_context(reducer)
            if step % 2 == 0:
                s, m = reducer(torch.tensor([1.0, step], dtype=torch.float64),
                               torch.tensor([float(rank)], dtype=torch.float64),
                               averaged=torch.tensor([False, True]), step=step, layout=3)
                seen.append((step, s.tolist(), m.tolist()))
            reducer.step = step + 1  # what the debugger does when a step ends
    result["uneven"] = seen
    return result


def make_model() -> nn.Module:
    """Units 0-3 of the first layer fire only on the second half of the batch (rank 1's), so
    rank 0 alone would call them dead; units 4-5 are dead for every sample."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                          nn.Linear(16, 3))
    with torch.no_grad():
        model[0].weight[:4] = 0.0
        model[0].weight[:4, 0] = 1.0
        model[0].bias[:4] = 0.0
        model[0].bias[4:6] = -100.0
    return model


def full_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(32, 8, generator=g)
    x[:, 0] = torch.where(torch.arange(32) < 16, -3.0, 3.0)
    return x, torch.randint(0, 3, (32,), generator=g)


def ddp_scenario(rank: int, out: Path, mode: str) -> dict:
    """Train a DDP model with the debugger; rank r gets half r of each full batch."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from lesson.production.alerts import NonFiniteLossAlert, TrainingAlert
    from lesson.debugger.monitor import NetworkDebugger
    from lesson.production.sinks import JSONLSink

    ddp = DDP(make_model())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    dbg = NetworkDebugger(ddp, opt, criterion, every=1, log_every=1,
                          sinks=[JSONLSink(out / f"{mode}{rank}.jsonl")],
                          alerts=[NonFiniteLossAlert("raise")])
    result: dict = {"alert": None}
    steps = {"equal": [3, 3], "nan": [3, 3], "uneven": [5, 3]}[mode][rank]
    try:
        with Join([ddp, dbg.reducer]):
            for step in range(steps):
                x, y = full_batch(step)
                x, y = x[16 * rank:16 * (rank + 1)], y[16 * rank:16 * (rank + 1)]
                if mode == "nan" and rank == 1 and step == 1:
                    x[5, 2] = float("nan")  # the bug, on one rank only
                opt.zero_grad()
                loss = criterion(ddp(x), y)
                dbg.record_loss(loss.detach())
                loss.backward()
                opt.step()
    except TrainingAlert as alert:
        result["alert"] = (alert.code, alert.step, alert.layer)
    result["history"] = dbg.history
    result["codes"] = [f.code for f in dbg.diagnose()]
    result["errors"] = list(dbg.errors)
    dbg.close()
    return result


def worker(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=60))  # fail, never hang
    try:
        result = {"reducer": reducer_scenarios(rank)}
        for mode in ("equal", "nan", "uneven"):
            result[mode] = ddp_scenario(rank, Path(out), mode)
        torch.save(result, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> tuple[dict, dict, Path]:
    out = tmp_path_factory.mktemp("ddp")
    mp.spawn(worker, args=(free_port(), str(out)), nprocs=2, join=True)
    return torch.load(out / "rank0.pt"), torch.load(out / "rank1.pt"), out


def train_single(steps: int) -> list[dict]:
    """The reference: one process, the full batch."""
    from lesson.debugger.monitor import NetworkDebugger

    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    dbg = NetworkDebugger(model, opt, criterion, every=1)
    for step in range(steps):
        x, y = full_batch(step)
        opt.zero_grad()
        loss = criterion(model(x), y)
        dbg.record_loss(loss.detach())
        loss.backward()
        opt.step()
    return dbg.history


def assert_records_equal(merged: list[dict], single: list[dict]) -> None:
    assert [r["step"] for r in merged] == [r["step"] for r in single]
    for m, s in zip(merged, single):
        assert m["loss"] == pytest.approx(s["loss"], rel=1e-5)
        assert m["layers"].keys() == s["layers"].keys()
        for name in s["layers"]:
            for key in STAT_KEYS:
                want, got = s["layers"][name][key], m["layers"][name][key]
                assert (got is None) == (want is None), (name, key)
                if want is not None:
                    assert got == pytest.approx(want, rel=1e-4, abs=1e-6), (m["step"], name, key)
        for name in s["params"]:
            for key in PARAM_KEYS:
                want, got = s["params"][name][key], m["params"][name][key]
                assert got == pytest.approx(want, rel=1e-4, abs=1e-7), (m["step"], name, key)


# -- the checks ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_reducer_operations_mismatch_and_uneven_inputs(ranks):
    r0, r1 = ranks[0]["reducer"], ranks[1]["reducer"]
    assert r0["world"] == 2 and r0["main"] and not r1["main"]
    for r in (r0, r1):
        sums, maxes = r["agree"]
        assert sums.tolist() == [3.0, 30.0, 4.0]        # act summed, grad (4, 4) averaged
        assert maxes.tolist() == [1.0, -5.0, 1.0]
        assert not r["agree_skipped"] and r["disagree_skipped"]
        assert r["after"][0].tolist() == [2.0, 2.0] and r["after"][1].tolist() == [1.0]
    assert r0["disagree"][0].tolist() == [0.0, 1.0, 2.0]  # kept local on both ranks
    assert r1["disagree"][0].tolist() == [100.0, 101.0]
    # both ranks at step 0; rank 0 alone at steps 2 and 4, rank 1 shadowing with neutral values
    assert r0["uneven"] == [(0, [2.0, 0.0], [1.0]), (2, [1.0, 2.0], [0.0]),
                            (4, [1.0, 4.0], [0.0])]
    assert r1["uneven"] == [(0, [2.0, 0.0], [1.0])]


@pytest.mark.slow
def test_ddp_merged_statistics_equal_one_process_on_the_full_batch(ranks):
    r0, r1, out = ranks[0]["equal"], ranks[1]["equal"], ranks[2]
    single = train_single(3)
    assert_records_equal(r0["history"], single)
    assert_records_equal(r1["history"], single)  # every rank holds the merged record
    # units 0-3 fire only on rank 1's half: a unit is dead only if dead on every rank
    assert r0["history"][0]["layers"]["1"]["dead_fraction"] == pytest.approx(2 / 16)
    assert (out / "equal0.jsonl").exists() and not (out / "equal1.jsonl").exists()
    assert r0["alert"] is None and r0["errors"] == [] and r1["errors"] == []


@pytest.mark.slow
def test_ddp_nan_on_one_rank_is_reported_and_stops_every_rank(ranks):
    from lesson.production.sinks import read_jsonl

    r0, r1, out = ranks[0]["nan"], ranks[1]["nan"], ranks[2]
    # rank 0's own batch is clean, yet the merged statistics carry rank 1's NaN
    assert r0["alert"] == r1["alert"] == ("NAN_OR_INF", 1, "0")
    bad = r0["history"][-1]
    assert math.isnan(bad["loss"]) and bad["layers"]["0"]["nonfinite"] > 0
    assert "NAN_OR_INF" in r0["codes"]
    assert [r["step"] for r in read_jsonl(out / "nan0.jsonl")] == [0, 1]
    assert not (out / "nan1.jsonl").exists()


@pytest.mark.slow
def test_ddp_rank_that_runs_out_of_batches_does_not_hang_the_others(ranks):
    r0, r1 = ranks[0]["uneven"], ranks[1]["uneven"]
    assert [r["step"] for r in r0["history"]] == [0, 1, 2, 3, 4]
    assert [r["step"] for r in r1["history"]] == [0, 1, 2]
    assert r0["history"][2]["layers"]["1"]["samples"] == 32 // 2  # per call, both ranks
    late = r0["history"][-1]["layers"]["1"]
    assert late["samples"] == 16 and late["dead_fraction"] == pytest.approx(6 / 16)  # rank 0 alone


def test_single_process_helpers():
    assert world_size() == 1 and is_main_process()
    with pytest.raises(RuntimeError, match="init_process_group"):
        RankReducer()
