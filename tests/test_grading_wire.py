"""What crosses back from the sandbox (lesson.course.grading.wire): every kind of plain value
comes back as itself, rebuilt by the grader; anything else is refused."""
from __future__ import annotations

from pathlib import Path, PurePosixPath

import numpy as np
import pytest
import torch

from lesson.course.grading import wire
from lesson.findings import Finding


def cross(value):
    return wire.decode(wire.loads(wire.dumps(wire.encode(value))))


@pytest.mark.parametrize("value", [True, False, 0, -3, 2.5, float("inf"), 1 + 2j, "text", b"\x00b",
                                   None, [], [1, [2, "x"]], (1, (2,)), {1, 2}, frozenset({"a"}),
                                   {"a": 1, 2: [3], (1, 2): "tuple key", None: {"nested": 1}}])
def test_plain_values_cross_as_themselves(value):
    back = cross(value)
    assert back == value and type(back) is type(value)


def test_subclasses_of_plain_types_cross_as_the_plain_type():
    class Loud(int):
        def __eq__(self, other):
            return True

    class Name(str):
        pass

    back = cross({"n": Loud(3), "s": Name("a"), "f": np.float32(0.5), "i": np.int64(7),
                  "b": np.bool_(True)})
    assert back == {"n": 3, "s": "a", "f": 0.5, "i": 7, "b": True}
    assert [type(v) for v in back.values()] == [int, str, float, int, bool]
    assert back["n"] != 4


def test_tensors_cross_detached_plain_and_on_the_cpu():
    class Rigged(torch.Tensor):
        pass

    t = torch.arange(3.0, requires_grad=True) * 2
    back = cross({"t": t, "r": torch.ones(2).as_subclass(Rigged)})
    assert type(back["t"]) is torch.Tensor and type(back["r"]) is torch.Tensor
    assert not back["t"].requires_grad and back["t"].tolist() == [0.0, 2.0, 4.0]
    view = torch.arange(6.0)
    sent = wire.encode(view[2:4])
    view[2] = 100.0                         # a copy crossed, not a view of the student's tensor
    assert wire.decode(wire.loads(wire.dumps(sent))).tolist() == [2.0, 3.0]


def test_arrays_cross_with_their_dtype_numbers_objects_strings_and_records():
    numbers = np.arange(6, dtype=np.int16).reshape(2, 3)[:, ::2]     # not contiguous
    objects = np.array([1, "a", None], dtype=object)
    words = np.array(["lr", "loss"])
    table = np.array([(1e-4, 2.3)], dtype=[("lr", "<f8"), ("loss", "<f8")])
    back = cross([numbers, objects, words, table])
    assert back[0].dtype == np.int16 and back[0].tolist() == [[0, 2], [3, 5]]
    assert back[1].dtype == object and back[1].tolist() == [1, "a", None]
    assert back[2].dtype == words.dtype and back[2].tolist() == ["lr", "loss"]
    assert back[3].dtype == table.dtype and back[3]["loss"].tolist() == [2.3]


def test_paths_findings_and_figures_are_rebuilt_by_the_grader():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [0.5, 0.25, 0.125])
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("curve")
    finding = Finding("DEAD_NEURONS", "dead", layer="fc1", evidence={"dead_fraction": 0.6},
                      step=4)
    back = cross({"p": Path("runs/x.csv"), "q": PurePosixPath("a/b"), "f": finding, "fig": fig})
    plt.close(fig)
    assert back["p"] == Path("runs/x.csv") and back["q"] == Path("a/b")
    f = back["f"]
    assert type(f) is Finding and (f.code, f.message, f.layer, f.step) == (
        "DEAD_NEURONS", "dead", "fc1", 4)
    assert f.evidence == {"dead_fraction": 0.6} and f.advice == finding.advice
    ax = back["fig"].axes[0]
    assert (ax.get_yscale(), ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == (
        "log", "step", "loss", "curve")
    assert ax.get_lines()[0].get_ydata().tolist() == [0.5, 0.25, 0.125]
    bare = cross(Finding("NAN_OR_INF", "n"))
    assert bare.layer is None and bare.step is None and bare.evidence == {}
    odd = cross(Finding("NAN_OR_INF", "n", evidence={"x": object()}))   # best effort:
    assert odd.code == "NAN_OR_INF" and odd.evidence == {}            # the finding still crosses


def test_an_outcome_crosses_with_its_metrics_and_findings():
    from broken_models.case import Outcome

    out = Outcome({"accuracy": 0.9}, findings=[Finding("OVERFITTING", "o")], report=None)
    back = cross(out)
    assert type(back) is Outcome and back.metrics == {"accuracy": 0.9}
    assert [f.code for f in back.findings] == ["OVERFITTING"] and back.report is None


def test_values_without_a_plain_form_or_nested_too_deep_do_not_cross():
    with pytest.raises(wire.Unreadable, match="cannot read back"):
        wire.encode(object())
    with pytest.raises(wire.Unreadable):
        wire.encode({"f": lambda: 1})
    deep: list = []
    for _ in range(60):
        deep = [deep]
    with pytest.raises(wire.Unreadable, match="50 levels"):
        wire.encode(deep)
    shallow: list = []
    for _ in range(40):
        shallow = [shallow]
    assert cross(shallow) == shallow


@pytest.mark.parametrize("forged", [
    {"__nndebug_wire__": "evil"}, {"plain": "dict without tag"}, ({1, 2},), object(),
    {"__nndebug_wire__": "ndarray-typed", "items": [], "dtype": "V70000"},
])
def test_forged_data_is_refused_by_the_grader(forged):
    with pytest.raises(wire.Unreadable):
        wire.decode(forged)


def test_a_figure_with_a_forged_scale_keeps_a_valid_one():
    spec = {"__nndebug_wire__": "figure", "axes": [{"xscale": "function", "yscale": "log",
                                                     "xlabel": "", "ylabel": "", "title": "",
                                                     "lines": []}]}
    ax = wire.decode(spec).axes[0]
    assert ax.get_xscale() == "linear" and ax.get_yscale() == "log"


def _nest(kind: str, levels: int):
    value = 1
    for _ in range(levels):
        value = {"list": lambda v: [v], "tuple": lambda v: (v,), "dict": lambda v: {"k": v},
                 "set": lambda v: frozenset({v})}[kind](value)
    return value


@pytest.mark.parametrize("kind", ["list", "tuple", "dict", "set"])
def test_fifty_levels_of_nesting_cross_and_fifty_one_do_not(kind):
    assert cross(_nest(kind, 50)) == _nest(kind, 50)
    with pytest.raises(wire.Unreadable, match="50 levels"):
        wire.encode(_nest(kind, 51))


def test_a_dicts_keys_count_as_a_level_too():
    assert cross({_nest("tuple", 49): 0}) == {_nest("tuple", 49): 0}
    with pytest.raises(wire.Unreadable, match="50 levels"):
        wire.encode({_nest("tuple", 50): 0})


def test_a_value_that_contains_itself_is_unreadable_not_a_crash():
    loop: list = []
    loop.append(loop)
    table: dict = {}
    table["self"] = table
    keyed: dict = {}
    keyed["x"] = [keyed]
    arr = np.empty(1, dtype=object)
    arr[0] = arr
    for value in (loop, table, keyed, arr, {"deep": [table]}):
        with pytest.raises(wire.Unreadable):
            wire.encode(value)


def test_an_outcomes_report_crosses_too():
    from broken_models.case import Outcome

    back = cross(Outcome({"loss": 0.1}, findings=[],
                         report={"lrs": [1e-3, 1e-2], "losses": [2.0, 1.5]}))
    assert back.report == {"lrs": [1e-3, 1e-2], "losses": [2.0, 1.5]}


def test_a_tuple_keeps_the_lists_it_holds_and_long_strings_cross():
    assert cross((1, [2, 3])) == (1, [2, 3])
    assert cross(frozenset({(1, 2)})) == frozenset({(1, 2)})
    words = np.array(["x" * 9000])                 # 36,000-byte items: a long string, not a claim
    assert cross(words).tolist() == words.tolist()


def _in_lists(value, levels: int):
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("name, make, depth", [
    ("numpy scalar", lambda: np.float32(0.5), 1),          # the scalar, then its value
    ("array of strings", lambda: np.array(["a"]), 2),      # the array, its items, an item
    ("array of objects", lambda: np.array([None], dtype=object), 2),
    ("outcome metrics", lambda: __import__("broken_models.case", fromlist=["Outcome"]).Outcome(
        {"a": 1}, findings=[]), 2),
])
def test_every_wrapper_counts_as_one_level_of_the_fifty(name, make, depth):
    wire.encode(_in_lists(make(), 50 - depth))
    with pytest.raises(wire.Unreadable, match="50 levels"):
        wire.encode(_in_lists(make(), 51 - depth))


def test_a_finding_too_deep_for_its_evidence_still_crosses_without_it():
    from broken_models.case import Outcome

    def at(levels):
        out = Outcome({}, findings=[Finding("DEAD_NEURONS", "d", evidence={"x": 1})])
        back = wire.decode(wire.loads(wire.dumps(wire.encode(_in_lists(out, levels)))))
        for _ in range(levels):
            back = back[0]
        return back.findings[0].evidence
    assert at(47) == {"x": 1}           # outcome, finding, evidence, value: 51 levels
    assert at(48) == {}
