"""What crosses from the student's sandbox back to the grader: plain data, and nothing else.

The child (untrusted) turns every value it hands back into a tree of built-in types and plain
tensors, tagging the few course types the tests read (`Finding`, `Outcome`, a matplotlib
figure, a path, a NumPy array). The grader reads the bytes with `torch.load(weights_only=True)`,
which rebuilds only those types, so an object with a rigged `__eq__`, `__bool__` or
`__float__` cannot cross: at most its plain value does. The grader then rebuilds the tagged
values as its own trusted objects. The other direction (grader to child) is cloudpickle: the
child may run anything the grader gives it.
"""
from __future__ import annotations

import io
from pathlib import PurePath
from typing import Any

TAG = "__nndebug_wire__"
_PLAIN = (bool, int, float, complex, str, bytes, type(None))


class Unreadable(Exception):
    """A value that cannot leave the sandbox as plain data."""


def encode(value: Any, depth: int = 0) -> Any:
    """`value` as plain data (child side); raises Unreadable for what has no plain form."""
    import numpy as np
    import torch

    if depth > 50:
        raise Unreadable("a value nested more than 50 levels deep")
    for kind in (bool, int, float, complex, str, bytes):
        if isinstance(value, kind):
            return kind(value) if type(value) is not kind else value
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone().as_subclass(torch.Tensor)
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return {TAG: "ndarray-object", "items": encode(value.tolist(), depth + 1)}
        try:
            return {TAG: "ndarray", "data": torch.from_numpy(np.ascontiguousarray(value).copy())}
        except TypeError:   # a dtype torch has no tensor for: strings, records (genfromtxt)
            dtype = value.dtype.descr if value.dtype.names else value.dtype.str
            return {TAG: "ndarray-typed", "items": encode(value.tolist(), depth + 1),
                    "dtype": encode(dtype, depth + 1)}
    if isinstance(value, np.generic):
        return encode(value.item(), depth + 1)
    if isinstance(value, PurePath):
        return {TAG: "path", "path": str(value)}
    if isinstance(value, (list, tuple, set, frozenset)):
        kind = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}[
            next(k for k in (list, tuple, set, frozenset) if isinstance(value, k))]
        items = [encode(v, depth + 1) for v in list(value)]
        return items if kind == "list" else {TAG: kind, "items": items}
    if isinstance(value, dict):
        return {TAG: "dict", "items": [[encode(k, depth + 1), encode(v, depth + 1)]
                                       for k, v in list(value.items())]}
    special = _encode_course_type(value, depth)
    if special is not None:
        return special
    raise Unreadable(f"a {type(value).__module__}.{type(value).__qualname__}, which the grader "
                     f"cannot read back as plain data")


def _encode_course_type(value: Any, depth: int) -> dict | None:
    from lesson.findings import Finding

    if isinstance(value, Finding):
        return {TAG: "finding", "code": str(value.code), "message": str(value.message),
                "layer": None if value.layer is None else str(value.layer),
                "evidence": _best_effort(value.evidence, depth), "advice": str(value.advice),
                "step": None if value.step is None else int(value.step)}
    try:
        from broken_models.case import Outcome
    except ImportError:
        Outcome = None
    if Outcome is not None and isinstance(value, Outcome):
        return {TAG: "outcome", "metrics": encode(dict(value.metrics), depth + 1),
                "findings": [encode(f, depth + 1) for f in (value.findings or [])],
                "report": _best_effort(value.report, depth)}
    figure = _figure_class()
    if figure is not None and isinstance(value, figure):
        return {TAG: "figure", "axes": [_encode_axes(ax) for ax in value.axes]}
    return None


def _best_effort(value: Any, depth: int) -> Any:
    try:
        return encode(value, depth + 1)
    except Unreadable:
        return None


def _figure_class():
    import sys

    if "matplotlib.figure" not in sys.modules:
        return None
    return sys.modules["matplotlib.figure"].Figure


def _encode_axes(ax) -> dict:
    return {"xscale": str(ax.get_xscale()), "yscale": str(ax.get_yscale()),
            "xlabel": str(ax.get_xlabel()), "ylabel": str(ax.get_ylabel()),
            "title": str(ax.get_title()),
            "lines": [{"x": encode(list(map(float, line.get_xdata()))),
                       "y": encode(list(map(float, line.get_ydata())))}
                      for line in ax.get_lines()]}


def dumps(value: Any) -> bytes:
    """Plain data as bytes (child side)."""
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    """Plain data from bytes (grader side): only built-in types and plain tensors load."""
    import torch

    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


def decode(value: Any) -> Any:
    """The grader's own objects rebuilt from plain data (grader side)."""
    import torch

    if isinstance(value, _PLAIN):
        return value
    if type(value) is torch.Tensor:
        return value
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict) or TAG not in value:
        raise Unreadable(f"unexpected {type(value).__name__} on the wire")
    kind = value[TAG]
    if kind == "dict":
        return {_key(decode(k)): decode(v) for k, v in value["items"]}
    if kind in ("tuple", "set", "frozenset"):
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[kind](
            _key(decode(v)) if kind != "tuple" else decode(v) for v in value["items"])
    if kind == "ndarray":
        return value["data"].numpy()
    if kind == "ndarray-object":
        import numpy as np
        return np.array(decode(value["items"]), dtype=object)
    if kind == "ndarray-typed":
        import numpy as np
        dtype = decode(value["dtype"])
        dtype = np.dtype(dtype if isinstance(dtype, str) else list(dtype))
        if dtype.itemsize > 1 << 16:      # a sandbox's claim; the items are what crossed
            raise Unreadable(f"an array of {dtype.itemsize}-byte items")
        return np.array(decode(value["items"]), dtype=dtype)
    if kind == "path":
        from pathlib import Path
        return Path(value["path"])
    if kind == "finding":
        from lesson.findings import Finding
        return Finding(value["code"], value["message"], value["layer"],
                       decode(value["evidence"]) if value["evidence"] is not None else {},
                       value["advice"], value["step"])
    if kind == "outcome":
        from broken_models.case import Outcome
        return Outcome(decode(value["metrics"]), findings=decode(value["findings"]),
                       report=None if value["report"] is None else decode(value["report"]))
    if kind == "figure":
        return _figure(value)
    raise Unreadable(f"unknown tag {kind!r}")


def _key(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_key(v) for v in value)
    return value


def _figure(value: dict):
    """A real matplotlib Figure drawn by the grader from the student's plain data."""
    from matplotlib.figure import Figure

    fig = Figure()
    for spec in value["axes"]:
        ax = fig.add_subplot()
        for line in spec["lines"]:
            ax.plot(line["x"], line["y"])
        for scale, setter in (("xscale", ax.set_xscale), ("yscale", ax.set_yscale)):
            if spec[scale] in ("linear", "log", "symlog", "logit"):
                try:
                    setter(spec[scale])
                except ValueError:
                    pass
        ax.set_xlabel(spec["xlabel"])
        ax.set_ylabel(spec["ylabel"])
        ax.set_title(spec["title"])
    return fig
