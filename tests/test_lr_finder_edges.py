"""find_learning_rate's bookkeeping at its edges, on a model too small to take a second: the
CSV's marked row, the arguments it refuses, the sweep's rates and smoothing, where it stops,
and the report of a short sweep."""
from __future__ import annotations

import csv

import pytest
import torch
from torch import nn

from lesson.checks.lr_finder import LRFinderResult, find_learning_rate


def _data(n: int = 64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return x, (x[:, 0] > 0).long()


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(4, 2)


def _rows(result: LRFinderResult, tmp_path) -> list[dict]:
    result.to_csv(str(tmp_path / "sweep.csv"))
    return list(csv.DictReader((tmp_path / "sweep.csv").open()))


def test_the_csv_marks_the_row_nearest_the_suggestion_and_none_without_one(tmp_path):
    pairs = [(0.001, 2.0), (0.01, 1.5), (0.1, 1.0)]
    marked = _rows(LRFinderResult(pairs, [2.0, 1.8, 1.5], 0.012, "r", "end_lr"), tmp_path)
    assert [r["suggested"] for r in marked] == ["0", "1", "0"]
    unmarked = _rows(LRFinderResult(pairs, [2.0, 1.8, 1.5], None, "r", "end_lr"), tmp_path)
    assert [r["suggested"] for r in unmarked] == ["0", "0", "0"]
    assert LRFinderResult(pairs, [2.0, 1.8, 1.5], None, "r", "end_lr").steps_spent == 3


@pytest.mark.parametrize("kwargs, error, match", [
    ({"criterion": "cross_entropy"}, TypeError, "criterion must be a callable"),
    ({"end_lr": 0.0}, ValueError, "learning rates must be positive"),
])
def test_bad_arguments_are_refused(kwargs, error, match):
    x, y = _data()
    call = {"criterion": nn.CrossEntropyLoss(), "verbose": False} | kwargs
    with pytest.raises(error, match=match):
        find_learning_rate(_model(), x, y, **call)


def test_an_empty_loader_is_refused():
    with pytest.raises(ValueError, match="yields no batches"):
        find_learning_rate(_model(), [], None, nn.CrossEntropyLoss(), verbose=False)


def test_a_sweep_of_one_step_takes_its_start_rate():
    x, y = _data()
    result = find_learning_rate(_model(), x, y, nn.CrossEntropyLoss(), steps=1, verbose=False)
    assert result.lrs == [1e-7] and result.suggested_lr is None


def test_each_step_trains_at_its_rate_and_a_constant_loss_smooths_to_itself():
    x, y = _data()
    seen: list[float] = []
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)

    def constant(out, target):
        seen.append(opt.param_groups[0]["lr"])                 # the rate this step trains at
        return out.sum() * 0 + 1.0

    result = find_learning_rate(model, x, y, constant, start_lr=1e-4, end_lr=1.0, steps=5,
                                optimizer=opt, verbose=False)
    assert seen == pytest.approx(result.lrs) and result.lrs == pytest.approx(
        [1e-4, 1e-3, 1e-2, 1e-1, 1.0])
    assert result.smoothed_losses == pytest.approx([1.0] * 5)
    assert opt.param_groups[0]["lr"] == 0.5                    # the user's rate given back


def test_the_sweep_stops_where_the_smoothed_loss_passes_four_times_its_best():
    """A loss of 1 for 15 steps, then 6: the smoothed loss (beta 0.85) climbs past 4 at step
    20 and past 5 only at step 24 (counted from 0)."""
    from lesson.checks.lr_suggestion import smooth

    level = [1.0] * 15 + [6.0] * 25
    first_over_4 = next(i for i, v in enumerate(smooth(level)) if v > 4.0)
    first_over_5 = next(i for i, v in enumerate(smooth(level)) if v > 5.0)
    assert first_over_5 > first_over_4
    calls = []

    def jump(out, target):
        calls.append(1)
        return out.sum() * 0 + level[len(calls) - 1]

    x, y = _data()
    result = find_learning_rate(_model(), x, y, jump, steps=40, verbose=False, probes=False)
    assert result.stopped == "diverged" and len(result) == first_over_4 + 1


@pytest.mark.parametrize("points, short", [(6, True), (9, True), (10, False)])
def test_a_sweep_of_fewer_than_ten_points_is_reported_as_cut_short(points, short, capsys):
    calls = []

    def jump(out, target):
        calls.append(1)
        return out.sum() * 0 + (1.0 if len(calls) < points else 100.0)

    x, y = _data()
    result = find_learning_rate(_model(), x, y, jump, steps=40, probes=False)
    assert len(result) == points
    out = capsys.readouterr().out
    assert ("Could not complete LR sweep" in out) is short
    assert (f"Swept {points} steps" in out) is not short
