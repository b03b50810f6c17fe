"""The range-test CSV reader and plotter (`python -m lesson.checks.plot_lr_csv`), on files
written by hand: what is read from which column, what is drawn, where it is saved."""
from __future__ import annotations

from pathlib import Path

import pytest

from lesson.checks.plot_lr_csv import main, plot_lr_curve, read_lr_csv

FULL = ("lr,loss,smoothed_loss,suggested\n"
        "0.001,2.0,2.0,0\n0.01,1.5,1.8,1\n0.1,1.0,1.5,0\n1.0,9.0,3.0,1\n")


def _csv(tmp_path: Path, text: str, name: str = "range.test.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_column_is_read_and_the_first_marked_row_is_the_suggestion(tmp_path):
    lrs, losses, smoothed, suggested = read_lr_csv(str(_csv(tmp_path, FULL)))
    assert lrs == [0.001, 0.01, 0.1, 1.0] and losses == [2.0, 1.5, 1.0, 9.0]
    assert smoothed == [2.0, 1.8, 1.5, 3.0] and suggested == 0.01


def test_without_the_optional_columns_there_is_nothing_to_read(tmp_path):
    path = _csv(tmp_path, "lr,loss\n0.001,2.0\n0.01,1.5\n")
    assert read_lr_csv(str(path)) == ([0.001, 0.01], [2.0, 1.5], None, None)
    unmarked = _csv(tmp_path, "loss,lr,suggested\n2.0,0.001,0\n1.5,0.01,0\n", "u.csv")
    assert read_lr_csv(str(unmarked))[3] is None


@pytest.mark.parametrize("text", ["", "lr,smoothed_loss\n0.1,1.0\n", "loss,x\n1.0,2\n"])
def test_a_csv_without_lr_and_loss_is_refused(tmp_path, text):
    with pytest.raises(ValueError, match="'lr' and 'loss' columns"):
        read_lr_csv(str(_csv(tmp_path, text)))


def test_the_plot_draws_both_curves_on_a_log_axis_and_marks_the_suggestion(tmp_path):
    png = tmp_path / "out.png"
    fig = plot_lr_curve([0.001, 0.01, 0.1], [2.0, 1.5, 1.0], [2.0, 1.8, 1.5], 0.01,
                        path=str(png), title="mine")
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["loss"].get_ydata()) == [2.0, 1.5, 1.0]
    assert list(lines["smoothed loss"].get_ydata()) == [2.0, 1.8, 1.5]
    assert lines["loss"].get_linewidth() > 0 and lines["smoothed loss"].get_linewidth() > 0
    assert list(lines["suggested lr = 1.00e-02"].get_xdata()) == [0.01, 0.01]
    assert ax.get_xscale() == "log" and ax.get_title() == "mine"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_plot_leaves_out_what_it_was_not_given(tmp_path):
    fig = plot_lr_curve([0.001, 0.01], [2.0, 1.5])
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ["loss"]
    assert list(tmp_path.iterdir()) == []


def test_the_command_writes_beside_the_csv_and_says_what_it_drew(tmp_path, capsys):
    path = _csv(tmp_path, FULL)
    assert main([str(path)]) == 0
    out = tmp_path / "range.test.png"
    assert out.is_file()
    assert capsys.readouterr().out.strip() == f"wrote {out} (4 points, suggested lr 1.00e-02)"
    plain = _csv(tmp_path, "lr,loss\n0.001,2.0\n0.01,1.5\n", "plain.csv")
    assert main([str(plain), "-o", str(tmp_path / "chosen.png")]) == 0
    assert (tmp_path / "chosen.png").is_file()
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'chosen.png'} (2 points)"
