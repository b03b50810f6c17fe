"""The sinks write what the debugger measured, and each library's own reader gets it back."""
from __future__ import annotations

import json
import math
import struct
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from lesson.production.sinks import (BINS, JSONLSink, SinkLogger, TensorBoardSink, WandbSink,
                          flatten_record, model_tensors, read_jsonl, summarize)


def make_record(step: int, loss: float = 0.5) -> dict:
    return {
        "step": step, "loss": loss, "lr": 0.01,
        "layers": {"1": {"kind": "ReLU", "act_mean": 0.25, "act_std": 0.5, "act_min": 0.0,
                         "act_max": 3.0, "zero_fraction": 0.5, "dead_fraction": 0.125,
                         "sample_std": 0.4, "nonfinite": 0},
                   "2": {"kind": "Linear", "act_mean": -0.1, "act_std": 1.0, "act_min": -2.0,
                         "act_max": 2.5, "zero_fraction": 0.0, "dead_fraction": None,
                         "sample_std": 0.9, "nonfinite": 3}},
        "params": {"0.weight": {"grad_norm": 1.5, "weight_norm": 4.0, "update_ratio": 1e-3,
                                "nonfinite_grad": 0},
                   "0.bias": {"grad_norm": None, "weight_norm": 0.5, "update_ratio": None,
                              "nonfinite_grad": 0}},
    }


def tensors_with_nonfinite() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(32, 16, generator=g)
    a = torch.randn(200, generator=g) * 3 + 1
    a[[3, 50, 70]] = torch.tensor([math.nan, math.inf, -math.inf])
    return {"weights/0.weight": w, "activations/2": a, "activations/dead": torch.full((5,), math.nan)}


def check_histogram_against(h, source: torch.Tensor) -> None:
    x = source.double().flatten()
    finite = x[torch.isfinite(x)]
    assert h.nonfinite == x.numel() - finite.numel()
    assert h.num == finite.numel() == sum(h.counts)
    if finite.numel():
        assert h.min == pytest.approx(finite.min().item())
        assert h.max == pytest.approx(finite.max().item())
        assert h.sum == pytest.approx(finite.sum().item(), rel=1e-6, abs=1e-6)
        assert h.sum_squares == pytest.approx((finite ** 2).sum().item(), rel=1e-6)
        expected, _ = np.histogram(finite.numpy(), bins=BINS, range=(h.min, h.max))
        assert np.abs(np.asarray(h.counts) - expected).sum() <= 2  # ties at bin edges only


def test_summarize_counts_finite_values_and_reports_the_rest():
    tensors = tensors_with_nonfinite()
    hists = summarize(tensors)
    assert set(hists) == set(tensors)
    for tag, t in tensors.items():
        check_histogram_against(hists[tag], t)
    assert hists["activations/2"].nonfinite == 3
    assert hists["activations/dead"].num == 0 and hists["activations/dead"].nonfinite == 5


def test_flatten_record_keeps_nonfinite_and_skips_none():
    rec = make_record(0, loss=math.nan)
    flat = flatten_record(rec)
    assert math.isnan(flat["loss"])
    assert flat["activations/2/nonfinite"] == 3.0
    assert "activations/2/dead_fraction" not in flat and "params/0.bias/grad_norm" not in flat
    assert "activations/1/kind" not in flat


def test_jsonl_roundtrip_is_standard_json_and_keeps_nan(tmp_path: Path):
    path = tmp_path / "log" / "stats.jsonl"
    sink = JSONLSink(path, histograms=True)
    hists = summarize(tensors_with_nonfinite())
    sink.write(make_record(0, loss=math.inf))
    sink.write(make_record(100, loss=math.nan), hists)
    sink.close()
    for line in path.read_text().splitlines():  # strict JSON: no bare NaN/Infinity tokens
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    back = read_jsonl(path)
    assert [r["step"] for r in back] == [0, 100]
    assert back[0]["loss"] == math.inf and math.isnan(back[1]["loss"])
    assert back[1]["layers"] == make_record(100)["layers"]
    assert back[1]["histograms"]["activations/2"]["nonfinite"] == 3
    assert back[1]["histograms"]["activations/2"]["counts"] == hists["activations/2"].counts


def test_tensorboard_event_files_hold_the_values(tmp_path: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tensors = tensors_with_nonfinite()
    sink = TensorBoardSink(tmp_path)
    sink.write(make_record(0, loss=2.0), summarize(tensors))
    sink.write(make_record(100, loss=math.nan), summarize(tensors))
    sink.close()
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    loss = acc.Scalars("loss")
    assert [e.step for e in loss] == [0, 100]
    assert loss[0].value == 2.0 and math.isnan(loss[1].value)
    for tag, value in flatten_record(make_record(0, loss=2.0)).items():
        assert acc.Scalars(tag)[0].value == pytest.approx(value, rel=1e-6)
    assert acc.Scalars("activations/2/nonfinite")[0].value == 3
    assert acc.Scalars("activations/dead/nonfinite")[0].value == 5
    assert "activations/dead" not in acc.Tags()["histograms"]  # nothing finite to draw
    for tag in ("weights/0.weight", "activations/2"):
        h = acc.Histograms(tag)[-1].histogram_value
        x = tensors[tag].double().flatten()
        finite = x[torch.isfinite(x)]
        assert h.num == finite.numel() == sum(h.bucket)
        assert h.min == pytest.approx(finite.min().item(), rel=1e-6)
        assert h.max == pytest.approx(finite.max().item(), rel=1e-6)
        assert h.sum == pytest.approx(finite.sum().item(), rel=1e-6)
        assert h.sum_squares == pytest.approx((finite ** 2).sum().item(), rel=1e-6)


def read_wandb_records(run_file: Path):
    """Parse wandb's offline `.wandb` file (a LevelDB-style log of protobuf Records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # block trailer padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST chunk
            record = pb.Record()
            record.ParseFromString(buf)
            buf = b""
            yield record


def wandb_history(run_dir: Path, timeout: float = 20.0) -> list[dict]:
    """The run's history rows, once wandb's service has written the run's closing record
    (finish() can return before the file is complete)."""
    from google.protobuf.message import DecodeError

    deadline = time.monotonic() + timeout
    while True:
        (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
        try:
            records = list(read_wandb_records(run_file))
        except DecodeError:  # caught the writer mid-record: read again
            if time.monotonic() > deadline:
                raise
            records = []
        if any(r.WhichOneof("record_type") == "exit" for r in records) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            for r in records if r.WhichOneof("record_type") == "history"]


@pytest.mark.slow
def test_wandb_offline_run_holds_the_values(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    tensors = tensors_with_nonfinite()
    sink = WandbSink(project="nndebug-test", dir=str(tmp_path), mode="offline")
    sink.write(make_record(0, loss=2.0), summarize(tensors))
    sink.write(make_record(100, loss=math.nan), summarize(tensors))
    sink.close()
    rows = wandb_history(tmp_path)
    assert [r["_step"] for r in rows] == [0, 100]
    assert rows[0]["loss"] == 2.0 and math.isnan(rows[1]["loss"])
    for tag, value in flatten_record(make_record(0, loss=2.0)).items():
        assert rows[0][tag] == pytest.approx(value)
    assert rows[0]["activations/2/nonfinite"] == 3
    assert rows[0]["activations/dead/nonfinite"] == 5
    assert "activations/dead/values" not in rows[0]
    hist = summarize(tensors)["activations/2"]
    assert rows[0]["activations/2/values"] == hist.counts
    assert rows[0]["activations/2/bins"] == pytest.approx(hist.edges)
    check_histogram_against(hist, tensors["activations/2"])


class Recorder:
    def __init__(self, histograms: bool) -> None:
        self.wants_histograms = histograms
        self.calls: list[tuple[dict, dict | None]] = []
        self.closed = False

    def write(self, record, histograms=None) -> None:
        self.calls.append((record, histograms))

    def close(self) -> None:
        self.closed = True


def test_sink_logger_writes_only_at_log_steps_and_histograms_only_when_wanted():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model(torch.randn(8, 4)).sum().backward()
    model[2].bias.grad = None
    plain, hist = Recorder(False), Recorder(True)
    logger = SinkLogger([plain, hist], log_every=10, tensors=lambda: model_tensors(model))
    for step in range(0, 35, 5):
        logger(make_record(step))
    assert [r["step"] for r, _ in plain.calls] == [0, 10, 20, 30]
    assert all(h is None for _, h in plain.calls)
    tags = set(hist.calls[0][1])
    assert "weights/2.bias" in tags and "gradients/2.bias" not in tags
    check_histogram_against(hist.calls[0][1]["gradients/0.weight"], model[0].weight.grad)
    logger.close()
    assert plain.closed and hist.closed


def test_sink_logger_rejects_bad_arguments():
    with pytest.raises(ValueError, match="log_every"):
        SinkLogger([], log_every=0)
    with pytest.raises(TypeError, match="write"):
        SinkLogger([object()], log_every=1)


def test_sinks_that_never_write_leave_nothing_behind(tmp_path: Path):
    # in a distributed job every rank builds the sinks; only rank 0 writes
    jsonl, tb = JSONLSink(tmp_path / "a.jsonl"), TensorBoardSink(tmp_path / "tb")
    jsonl.close(), tb.close()
    assert list(tmp_path.iterdir()) == []


# -- wired into the debugger: NetworkDebugger(..., log_every=N, sinks=[...]) -------------------

def train_with_debugger(sinks, steps: int, log_every: int, every: int = 20):
    from lesson.debugger.monitor import NetworkDebugger

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    dbg = NetworkDebugger(model, opt, criterion, every=every, log_every=log_every, sinks=sinks)
    for _ in range(steps):
        opt.zero_grad()
        loss = criterion(model(x), y)
        dbg.record_loss(loss.detach())
        loss.backward()
        opt.step()
    return dbg, model, x


def test_debugger_logs_every_n_steps_to_jsonl(tmp_path: Path):
    dbg, _, _ = train_with_debugger([JSONLSink(tmp_path / "s.jsonl")], steps=31, log_every=15)
    dbg.close()
    lines = read_jsonl(tmp_path / "s.jsonl")
    assert [r["step"] for r in lines] == [0, 15, 30]  # log steps are statistics steps too
    by_step = {r["step"]: r for r in dbg.history}
    for line in lines:
        assert line["layers"] == by_step[line["step"]]["layers"]
        assert line["loss"] == pytest.approx(dbg.loss_history[line["step"]])


def test_debugger_histograms_in_tensorboard_match_the_tensors(tmp_path: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # the last step (40) is a log step, so the model still holds what was logged
    dbg, model, x = train_with_debugger([TensorBoardSink(tmp_path)], steps=41, log_every=20)
    dbg.close()
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    tags = set(acc.Tags()["histograms"])
    assert {"weights/0.weight", "gradients/0.weight", "activations/1"} <= tags
    for tag, source in (("weights/0.weight", model[0].weight), ("gradients/2.bias",
                                                                 model[2].bias.grad)):
        h = acc.Histograms(tag)[-1]
        assert h.step == 40
        v = h.histogram_value
        assert v.num == source.numel()
        assert v.sum == pytest.approx(source.double().sum().item(), rel=1e-5, abs=1e-7)
        assert v.sum_squares == pytest.approx((source.double() ** 2).sum().item(), rel=1e-5)
        assert v.min == pytest.approx(source.min().item()) and v.max == pytest.approx(source.max().item())
    # activations: a small strided sample (1024 of the 64 x 32 outputs) of the ReLU at step 40
    act = acc.Histograms("activations/1")[-1].histogram_value
    record = dbg.history[-1]["layers"]["1"]
    assert act.num == 1024 < x.shape[0] * 32
    assert record["act_min"] <= act.min and act.max <= record["act_max"]
    assert acc.Scalars("activations/1/nonfinite")[-1].value == 0
    assert acc.Scalars("params/0.weight/grad_norm")[-1].value == pytest.approx(
        model[0].weight.grad.norm().item(), rel=1e-5)
    # plots can draw histograms over time from what the log steps kept
    assert "activations/1" in dbg.history[-1]["histograms"]


def test_hooks_keep_no_activation_between_log_steps(tmp_path: Path):
    dbg, _, _ = train_with_debugger([TensorBoardSink(tmp_path)], steps=25, log_every=20)
    assert dbg._samples == {}
    dbg.close()
