"""`nndebug report`: a debugger report rendered into the diagnosis prompt, ready to paste."""
from __future__ import annotations

import json
import math
import socket

import pytest
import torch
from torch import nn

from lesson.course import cli
from lesson.course.artifacts import OUTPUTS, PROMPT
from lesson.findings import Finding
from lesson.course.report import (load_report, make_report, prompt_text, render_findings,
                                  render_prompt, render_report,
                           report_from_debugger, save_report, validate_report)

RECORD = {
    "step": 3, "loss": 2.5, "lr": 10.0,
    "layers": {"0": {"kind": "Linear", "act_mean": 0.1, "act_std": 40.0, "act_min": -90.0,
                     "act_max": 95.0, "zero_fraction": 0.0, "dead_fraction": None,
                     "sample_std": 30.0, "nonfinite": 0}},
    "params": {"0.weight": {"grad_norm": 123.0, "weight_norm": 4.0, "update_ratio": 0.9,
                            "nonfinite_grad": 0}},
}


def sample_report() -> dict:
    findings = [Finding("LR_TOO_HIGH", "update/weight ratio 0.9 at step 3", layer="0",
                        evidence={"update_ratio": 0.9}, step=3),
                Finding("NAN_OR_INF", "loss is NaN from step 5", evidence={"first_step": 5},
                        step=5)]
    return make_report(findings, title="my run", symptom="the loss went NaN",
                       loss_history=[2.3, 5.0, 40.0, float("nan")], history=[RECORD],
                       metrics={"val_accuracy": 0.1}, code="optimizer = SGD(lr=10)")


def test_roundtrip_through_json_keeps_everything(tmp_path):
    report = sample_report()
    path = tmp_path / "run.json"
    save_report(report, path)
    back = load_report(path)
    assert back["findings"] == report["findings"]
    assert back["history"] == [RECORD]
    assert back["loss_history"][:3] == [2.3, 5.0, 40.0] and math.isnan(back["loss_history"][3])
    back_findings = [Finding.from_dict(f) for f in back["findings"]]
    assert [f.code for f in back_findings] == ["LR_TOO_HIGH", "NAN_OR_INF"]   # the cause first
    assert back_findings[1].explained_by == "LR_TOO_HIGH"
    assert "Likely a consequence of `LR_TOO_HIGH`" in render_findings(back["findings"])


def test_rendered_prompt_holds_the_prompt_and_the_evidence():
    text = render_prompt(sample_report())
    assert not text.startswith("---")                      # front matter stripped
    assert prompt_text() in text
    assert "name: nn-debugger" not in text
    for needle in ("`LR_TOO_HIGH` in `0`", "update_ratio=0.9", "first seen at step 3",
                   "the loss went NaN", "First non-finite value at index 3", "| 0.weight | 123",
                   "```python\noptimizer = SGD(lr=10)\n```", "val_accuracy: 0.1"):
        assert needle in text, needle
    assert text.index("# System prompt") < text.index("# The run to diagnose")


def test_an_empty_report_still_renders():
    text = render_report(make_report([]))
    assert "no finding" in text and "No loss was recorded" in text


@pytest.mark.parametrize("bad, message", [
    ([], "JSON object"),
    ({"format": "other", "version": 1, "findings": []}, "format"),
    ({"format": "nndebug-report", "version": 1}, "findings"),
    ({"format": "nndebug-report", "version": 1, "findings": [{"code": "LR_TOO_HIGH"}]}, "message"),
    ({"format": "nndebug-report", "version": 1,
      "findings": [{"code": "NOT_A_CODE", "message": "x"}]}, "unknown diagnosis code"),
    ({"format": "nndebug-report", "version": 1, "findings": [], "history": {}}, "history"),
])
def test_bad_reports_are_refused_with_a_reason(bad, message):
    with pytest.raises(ValueError, match=message):
        validate_report(bad)


def test_make_report_wants_findings():
    with pytest.raises(TypeError, match="Finding"):
        make_report([{"code": "LR_TOO_HIGH"}])


def test_cli_renders_a_saved_report_without_the_network(tmp_path, capsys, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("nndebug report must not open a connection")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    path = tmp_path / "run.json"
    save_report(sample_report(), path)
    assert cli.main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "`LR_TOO_HIGH`" in out and "## Diagnostic protocol" in out
    out_file = tmp_path / "prompt.md"
    assert cli.main(["report", str(path), "-o", str(out_file)]) == 0
    assert out_file.read_text(encoding="utf-8") == render_prompt(load_report(path))
    assert cli.main(["report", str(path), "--report-only"]) == 0
    assert "Diagnostic protocol" not in capsys.readouterr().out


def test_cli_explains_a_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    assert cli.main(["report", str(bad)]) == 2
    assert "not JSON" in capsys.readouterr().err
    bad.write_text(json.dumps({"format": "nndebug-report", "version": 2, "findings": []}))
    assert cli.main(["report", str(bad)]) == 2


def test_report_from_a_live_debugger():
    from lesson import NetworkDebugger

    torch.manual_seed(0)
    x = torch.randn(64, 10)
    y = (x[:, 0] > 0).long()
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=10.0)
    criterion = nn.CrossEntropyLoss()
    with NetworkDebugger(model, optimizer, criterion, every=1) as debugger:
        for _ in range(30):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            debugger.record_loss(loss)
            loss.backward()
            optimizer.step()
    report = report_from_debugger(debugger, title="lr=10")
    validate_report(report)
    assert len(report["loss_history"]) == 30 and report["history"]
    codes = [f["code"] for f in report["findings"]]
    assert "LR_TOO_HIGH" in codes
    text = render_prompt(report)
    assert "`LR_TOO_HIGH`" in text and "| parameter |" in text
    json.dumps(report)                                      # plain data only


@pytest.mark.slow
def test_report_from_a_case_hides_the_answer(tmp_path, capsys):
    from broken_models import get_case

    case = get_case("lr_too_high")
    path = tmp_path / "case.json"
    assert cli.main(["report", "--case", "lr_too_high", "--save-json", str(path)]) == 0
    out = capsys.readouterr().out
    report = load_report(path)
    assert "LR_TOO_HIGH" in [f["code"] for f in report["findings"]]
    assert case.symptom in out                              # the symptom
    rate = [ln.strip() for ln in case.source("broken").splitlines() if '"lr"' in ln]
    assert rate and all(ln in out for ln in rate)          # and the broken code, its rate too
    assert case.fix not in out and case.title not in out   # never the answer
    assert "lr_too_high" not in out
    assert "train_fixed" not in out


def test_unknown_case_is_a_clear_error(capsys):
    assert cli.main(["report", "--case", "no_such_case"]) == 2
    assert "no case named" in capsys.readouterr().err


def test_prompt_file_is_where_the_artifacts_are():
    assert (OUTPUTS / PROMPT).is_file()


def test_layer_tables_show_the_latest_full_record_not_a_light_one():
    from lesson.course.report import render_layers
    light = {**RECORD, "step": 4, "full": False, "layers": {"0": {**RECORD["layers"]["0"], "sample_std": None,
                                                   "zero_fraction": None, "act_min": None}},
             "params": {"0.weight": {**RECORD["params"]["0.weight"], "update_ratio": None}}}
    text = render_layers([RECORD, light])
    assert "Latest full record: step 3" in text and "| 30 |" in text and "| 0.9 |" in text
    assert "step 4" in render_layers([light])            # only light records: the last one
