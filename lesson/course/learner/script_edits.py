"""Changes a student might make to a case's training script, made by a program: the remedies
the course suggests and the generic symptom hiders, each applied to any case's source.

The clinics' tests use them to hold the course to its word: every remedy the course's texts
suggest for a case must pass the repair judgement when applied to the broken script, and every
hider (a lower or higher learning rate, fewer steps, clipping, weight decay, a smaller model,
another seed) must fail it unless the case declares it a real fix.

An edit rewrites the training function's source (so the result is a script a student could
have typed: the judgement reads its source and runs it). Edits that act on the objects the
script builds (the optimizers, the model) insert one call to a helper of this module just
before the statement that trains (the first one that calls `.backward()`); the helper finds
those objects among the function's local variables. An edit that finds nothing to change
raises `NotApplicable`, at edit time or when the script runs.
"""
from __future__ import annotations

import ast
import itertools
import linecache
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from lesson.course.learner.harness import _HARNESS

#: the name the inserted calls use for this module inside the edited script
HELPERS = "_nndebug_edit"
_ACTIVATIONS = (nn.ReLU, nn.LeakyReLU, nn.PReLU, nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU,
                nn.Mish, nn.Sigmoid, nn.Tanh, nn.Softplus, nn.Hardtanh, nn.ReLU6)
#: names and keywords of a script's settings that size a model
_SIZE_NAME = re.compile(r"(?i)^(n_)?(hidden(_size|_units|_dim)?|width|units|channels|d_model|"
                        r"dim|neurons)$")
_counter = itertools.count()


class NotApplicable(Exception):
    """The edit finds nothing to change in this script (no optimizer, no loop, no layer)."""


@dataclass(frozen=True)
class Edit:
    """One change, applied to a training function's source."""

    name: str
    says: str
    apply: Callable[[str], str]

    def __call__(self, source: str) -> str:
        return self.apply(source)


# -- finding places in a script ------------------------------------------------------------------
def _function(tree: ast.Module) -> ast.FunctionDef:
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if fn is None:
        raise NotApplicable("no function in the source")
    return fn


def _calls(node: ast.AST, attr: str) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == attr for n in ast.walk(node))


def _training_statement(fn: ast.FunctionDef) -> int:
    """The index in the function's body of the statement that trains: the first that calls
    `.backward()`, else the first that builds a NetworkDebugger, else the first loop."""
    tests = [lambda s: _calls(s, "backward"),
             lambda s: any(isinstance(n, ast.Call) and ast.unparse(n.func).endswith(
                 "NetworkDebugger") for n in ast.walk(s)),
             lambda s: isinstance(s, (ast.For, ast.While))]
    for test in tests:
        for i, stmt in enumerate(fn.body):
            if test(stmt):
                return i
    raise NotApplicable("no statement that trains")


def _parse(source: str) -> tuple[str, ast.FunctionDef]:
    text = textwrap.dedent(source)
    return text, _function(ast.parse(text))


def _indent(lines: list[str], lineno: int) -> str:
    line = lines[lineno - 1]
    return line[:len(line) - len(line.lstrip())]


def _insert_lines(text: str, inserts: list[tuple[int, str]]) -> str:
    """`text` with each (line number, code) inserted before that line, at its indentation;
    every other line stays exactly as written (the judgement compares lines)."""
    lines = text.splitlines()
    for lineno, code in sorted(inserts, reverse=True):
        lines.insert(lineno - 1, _indent(lines, lineno) + code)
    return "\n".join(lines) + "\n"


def _splice(text: str, node: ast.AST, new: str) -> str:
    """`text` with the source of `node` (on one line) replaced by `new`."""
    lines = text.splitlines()
    if node.lineno != node.end_lineno:
        raise NotApplicable("an expression over several lines")
    line = lines[node.lineno - 1]
    lines[node.lineno - 1] = line[:node.col_offset] + new + line[node.end_col_offset:]
    return "\n".join(lines) + "\n"


def _helper_code(name: str, *args: str) -> str:
    return f"{HELPERS}.{name}(locals(), {', '.join(args)})".replace(", )", ")")


def _before_training(name: str, *args: str) -> Callable[[str], str]:
    """An edit that calls helper `name` on the function's locals before it trains."""
    def apply(source: str) -> str:
        text, fn = _parse(source)
        stmt = fn.body[_training_statement(fn)]
        return _insert_lines(text, [(stmt.lineno, _helper_code(name, *args))])
    return apply


# -- the edits that rewrite the source itself ----------------------------------------------------
def _fewer_steps(factor: float) -> Callable[[str], str]:
    def apply(source: str) -> str:
        text, fn = _parse(source)
        for node in ast.walk(fn):
            if (isinstance(node, ast.For) and isinstance(node.iter, ast.Call)
                    and ast.unparse(node.iter.func) == "range" and node.iter.args
                    and (_calls(node, "backward") or _calls(node, "step"))):
                stop = node.iter.args[-1] if len(node.iter.args) > 1 else node.iter.args[0]
                segment = ast.get_source_segment(text, stop)
                return _splice(text, stop, f"max(1, int(({segment}) * {factor}))")
        raise NotApplicable("no training loop over range(...)")
    return apply


def _method_statements(text: str, fn: ast.FunctionDef,
                       method: str) -> list[tuple[ast.Expr, str]]:
    """Each statement of `fn` that is a call `<receiver>.<method>(...)`, with the receiver's
    source (`optimizer` in `optimizer.step()`)."""
    return [(node, ast.get_source_segment(text, node.value.func.value))
            for node in ast.walk(fn)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == method]


def _clip(max_norm: float) -> Callable[[str], str]:
    def apply(source: str) -> str:
        text, fn = _parse(source)
        inserts = [(node.lineno, f"{HELPERS}.clip({receiver}, {max_norm})")
                   for node, receiver in _method_statements(text, fn, "step")
                   if not node.value.args]
        if not inserts:
            raise NotApplicable("no optimizer.step() call")
        return _insert_lines(text, inserts)
    return apply


def _stop_early() -> Callable[[str], str]:
    """After each validation loss the script records, leave the training loop once that
    loss rose above its best (patience 1): early stopping as a student writes it."""
    def apply(source: str) -> str:
        text, fn = _parse(source)
        found = _method_statements(text, fn, "record_val_loss")
        if not found:
            raise NotApplicable("no validation loss recorded: nothing to stop at")
        lines = text.splitlines()
        for node, debugger in sorted(found, key=lambda f: f[0].end_lineno, reverse=True):
            lines.insert(node.end_lineno, _indent(lines, node.end_lineno)
                         + f"if {HELPERS}.past_best({debugger}): break")
        return "\n".join(lines) + "\n"
    return apply


def past_best(debugger: Any) -> bool:
    """Whether the last validation loss the debugger recorded is above the best before it."""
    vals = list(debugger.val_loss_history)
    return len(vals) >= 2 and vals[-1] > min(vals[:-1])


def _another_seed(offset: int) -> Callable[[str], str]:
    def apply(source: str) -> str:
        text, fn = _parse(source)
        seed = fn.args.args[0].arg if fn.args.args else None
        if seed is None:
            raise NotApplicable("the function takes no seed")
        first = fn.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                and len(fn.body) > 1:               # after a docstring
            first = fn.body[1]
        return _insert_lines(text, [(first.lineno, f"{seed} = {seed} + {offset}")])
    return apply


def _smaller_model(factor: float) -> Callable[[str], str]:
    """Shrink the model's widths: the inner sizes of a list of layer widths passed to a call
    (`mlp([64, 32, 10])`), and ints bound to a width name (`hidden=32`, `HIDDEN = 32`,
    `config["hidden"] = 32`, `{"hidden": 32}`)."""
    def width(node: ast.expr) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 4

    def apply(source: str) -> str:
        text, fn = _parse(source)
        found: list[ast.Constant] = []
        for node in ast.walk(fn):
            if isinstance(node, ast.Call):
                for arg in node.args:
                    if (isinstance(arg, ast.List) and len(arg.elts) >= 3
                            and all(isinstance(e, ast.Constant) and type(e.value) is int
                                    for e in arg.elts)):
                        found += [e for e in arg.elts[1:-1] if width(e)]
                found += [kw.value for kw in node.keywords
                          if kw.arg and _SIZE_NAME.match(kw.arg) and width(kw.value)]
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                key = (target.id if isinstance(target, ast.Name) else
                       target.slice.value if isinstance(target, ast.Subscript)
                       and isinstance(target.slice, ast.Constant) else None)
                if isinstance(key, str) and _SIZE_NAME.match(key) and width(node.value):
                    found.append(node.value)
            elif isinstance(node, ast.Dict):
                found += [v for k, v in zip(node.keys, node.values)
                          if isinstance(k, ast.Constant) and isinstance(k.value, str)
                          and _SIZE_NAME.match(k.value) and width(v)]
        lines = text.splitlines()
        found = [n for n in found if not _HARNESS.search(lines[n.lineno - 1])]  # measuring code
        if not found:
            raise NotApplicable("no layer width found")
        for node in sorted(found, key=lambda n: (n.lineno, n.col_offset), reverse=True):
            text = _splice(text, node, str(max(2, int(node.value * factor))))
        return text
    return apply


# -- helpers the edited scripts call -------------------------------------------------------------
def _optimizers(scope: dict[str, Any]) -> list[torch.optim.Optimizer]:
    found = [v for v in scope.values() if isinstance(v, torch.optim.Optimizer)]
    if not found:
        raise NotApplicable("no optimizer among the script's variables before it trains")
    return found


def _models(scope: dict[str, Any]) -> list[nn.Module]:
    found = [v for k, v in scope.items() if isinstance(v, nn.Module)
             and any(True for _ in v.parameters()) and not k.startswith("_")]
    if not found:
        raise NotApplicable("no model among the script's variables before it trains")
    return found


def scale_lr(scope: dict[str, Any], factor: float) -> None:
    """Multiply every optimizer's learning rate (and its schedulers' base rates) by `factor`."""
    for opt in _optimizers(scope):
        for group in opt.param_groups:
            group["lr"] = group["lr"] * factor
            if "initial_lr" in group:
                group["initial_lr"] = group["initial_lr"] * factor
    for value in scope.values():
        if isinstance(value, torch.optim.lr_scheduler.LRScheduler):
            value.base_lrs = [b * factor for b in value.base_lrs]


def weight_decay(scope: dict[str, Any], value: float) -> None:
    """Give every optimizer weight decay `value` (L2 for SGD and Adam, decoupled for AdamW)."""
    for opt in _optimizers(scope):
        for group in opt.param_groups:
            group["weight_decay"] = value


def clip(optimizer: Any, max_norm: float) -> None:
    """Clip the gradient norm of what `optimizer` steps (a no-op for a scheduler's step)."""
    if isinstance(optimizer, torch.optim.Optimizer):
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(params, max_norm)


def _replace(model: nn.Module, pick: Callable[[nn.Module], bool],
             make: Callable[[nn.Module], nn.Module]) -> int:
    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if pick(child):
                setattr(parent, name, make(child))
                count += 1
    return count


def swap_activation(scope: dict[str, Any], old: str, new: str) -> None:
    """Replace every activation layer of a class named in `old` ("Sigmoid,Tanh", or "*" for
    any) by a fresh `new` (a torch.nn class name)."""
    kinds = tuple(a for a in _ACTIVATIONS if old == "*" or a.__name__ in old.split(","))
    made = getattr(nn, new)
    if not sum(_replace(m, lambda c: isinstance(c, kinds) and type(c) is not made,
                        lambda c: made()) for m in _models(scope)):
        raise NotApplicable(f"no {old} activation layer to replace with {new}")


class Normalise(nn.Module):
    """Layer normalisation without parameters (the optimizer is already built)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.layer_norm(x, x.shape[-1:])


def add_normalisation(scope: dict[str, Any]) -> None:
    """Normalise the input of every activation layer (Linear -> norm -> activation)."""
    if not sum(_replace(m, lambda c: isinstance(c, _ACTIVATIONS),
                        lambda c: nn.Sequential(Normalise(), c)) for m in _models(scope)):
        raise NotApplicable("no activation layer to normalise before")


def add_dropout(scope: dict[str, Any], p: float) -> None:
    """Dropout after every activation layer."""
    if not sum(_replace(m, lambda c: isinstance(c, _ACTIVATIONS),
                        lambda c: nn.Sequential(c, nn.Dropout(p))) for m in _models(scope)):
        raise NotApplicable("no activation layer to put dropout after")


class Residual(nn.Module):
    """x + f(x)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.inner(x)


def add_residual(scope: dict[str, Any]) -> None:
    """In every nn.Sequential, make each square Linear with the activation after it a residual
    block (x + act(Wx + b)), keeping its parameters."""
    count = 0
    for model in _models(scope):
        for seq in [m for m in model.modules() if isinstance(m, nn.Sequential)]:
            items, out, i = list(seq), [], 0
            while i < len(items):
                a = items[i]
                b = items[i + 1] if i + 1 < len(items) else None
                if (isinstance(a, nn.Linear) and a.in_features == a.out_features
                        and isinstance(b, _ACTIVATIONS)):
                    out.append(Residual(nn.Sequential(a, b)))
                    count, i = count + 1, i + 2
                else:
                    out.append(a)
                    i += 1
            if len(out) != len(items):
                for key in list(seq._modules):
                    del seq._modules[key]
                for k, m in enumerate(out):
                    seq.add_module(str(k), m)
    if not count:
        raise NotApplicable("no square layer to make residual")


def reinit(scope: dict[str, Any], how: str) -> None:
    """Re-initialise every layer: "default" (PyTorch's own reset_parameters), "kaiming"
    (Kaiming-normal weights for ReLU, zero biases) or "xavier" (Xavier-uniform, zero biases)
    for Linear and convolution layers, or "orthogonal" (the recurrent weights of RNN, LSTM
    and GRU layers, gain 1)."""
    count = 0
    with torch.no_grad():
        for model in _models(scope):
            for m in model.modules():
                if how in ("kaiming", "xavier") and isinstance(m, (nn.Linear, nn.Conv1d,
                                                                     nn.Conv2d)):
                    if how == "kaiming":
                        nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                    else:
                        nn.init.xavier_uniform_(m.weight)
                    if m.bias is not None:
                        m.bias.zero_()
                    count += 1
                elif how == "orthogonal" and isinstance(m, nn.RNNBase):
                    for name, p in m.named_parameters():
                        if name.startswith("weight_hh"):
                            nn.init.orthogonal_(p, gain=1.0)
                            count += 1
                elif how == "default" and m is not model and hasattr(m, "reset_parameters") \
                        and any(True for _ in m.parameters(recurse=False)):
                    m.reset_parameters()
                    count += 1
    if not count:
        raise NotApplicable(f"no layer to re-initialise ({how})")


# -- the named edits -----------------------------------------------------------------------------
def lower_lr(factor: float = 10.0) -> Edit:
    return Edit(f"lower_lr_{factor:g}x", f"the learning rate divided by {factor:g}",
                _before_training("scale_lr", repr(1 / factor)))


def raise_lr(factor: float = 10.0) -> Edit:
    return Edit(f"raise_lr_{factor:g}x", f"the learning rate multiplied by {factor:g}",
                _before_training("scale_lr", repr(float(factor))))


def fewer_steps(factor: float = 1 / 3) -> Edit:
    return Edit("fewer_steps", f"the training loop cut to {factor:.0%} of its steps",
                _fewer_steps(factor))


def clip_gradients(max_norm: float = 1.0) -> Edit:
    return Edit("clip_gradients", f"the gradient norm clipped at {max_norm:g} before each step",
                _clip(max_norm))


def add_weight_decay(value: float = 1e-3) -> Edit:
    return Edit("weight_decay", f"weight decay {value:g} on every optimizer",
                _before_training("weight_decay", repr(value)))


def smaller_model(factor: float = 0.5) -> Edit:
    return Edit("smaller_model", f"the model's widths cut to {factor:.0%}", _smaller_model(factor))


def stop_early() -> Edit:
    return Edit("stop_early", "training stopped once the validation loss rose above its best",
                _stop_early())


def another_seed(offset: int = 1) -> Edit:
    return Edit("another_seed", f"the seed shifted by {offset}", _another_seed(offset))


def dropout(p: float = 0.2) -> Edit:
    return Edit("dropout", f"dropout {p:g} after every activation",
                _before_training("add_dropout", repr(p)))


def activation(old: str, new: str) -> Edit:
    return Edit(f"activation_{new}", f"{old} activations replaced by {new}",
                _before_training("swap_activation", repr(old), repr(new)))


def normalisation() -> Edit:
    return Edit("normalisation", "a normalisation before every activation",
                _before_training("add_normalisation"))


def residual() -> Edit:
    return Edit("residual", "square layers made residual blocks", _before_training("add_residual"))


def reinitialise(how: str = "default") -> Edit:
    return Edit(f"reinit_{how}", f"every layer re-initialised ({how})",
                _before_training("reinit", repr(how)))


#: the generic symptom hiders, each a change a student could make without touching the bug
HIDERS: tuple[Edit, ...] = (lower_lr(10), raise_lr(10), fewer_steps(1 / 3), clip_gradients(1.0),
                            add_weight_decay(1e-3), smaller_model(0.5), another_seed(1))


# -- compiling an edited script ------------------------------------------------------------------
def compile_script(source: str, namespace: dict[str, Any], name: str) -> Callable[..., Any]:
    """The function `name` defined by `source`, compiled in a copy of `namespace` (a case
    page's globals) with this module as `_nndebug_edit`, its source readable by `inspect` (the
    repair judgement reads it), as if a student had typed it into a notebook cell."""
    filename = f"<edited {name} {next(_counter)}>"
    text = textwrap.dedent(source)
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    scope = dict(namespace)
    scope[HELPERS] = __import__(__name__, fromlist=["_"])
    exec(compile(text, filename, "exec"), scope)
    return scope[name]


def edited(case: Any, edits: list[Edit] | tuple[Edit, ...], which: str = "broken",
           name: str = "repaired") -> Callable[..., Any]:
    """`case`'s broken (or fixed) script with `edits` applied in order, renamed `name`."""
    import importlib
    import inspect

    module = importlib.import_module(case.module)
    fn = module.train_broken if which == "broken" else module.train_fixed
    source = textwrap.dedent(inspect.getsource(fn))
    source = re.sub(r"def train_(broken|fixed)\(", f"def {name}(", source, count=1)
    for edit in edits:
        source = edit(source)
    return compile_script(source, vars(module), name)


# -- the remedies the course's texts suggest -----------------------------------------------------
@dataclass(frozen=True)
class Remedy:
    """A remedy as the course words it (`pattern`, matched in advice, hints and tables), and
    the edits that apply it: tried in order, the first that passes counts, when the text asks
    for a search ("10x at a time", "until ..."), else the first alone."""

    name: str
    pattern: re.Pattern[str]
    edits: tuple[Edit, ...]


def _r(name: str, pattern: str, *edits: Edit) -> Remedy:
    return Remedy(name, re.compile(pattern, re.I), edits)


def _both(first: Edit, second: Edit) -> Edit:
    return Edit(f"{first.name}+{second.name}", f"{first.says}, and {second.says}",
                lambda source: second(first(source)))


_DECADES = (10, 100, 1000, 10_000, 100_000, 1_000_000)
REMEDIES: tuple[Remedy, ...] = (
    _r("lower the learning rate",
       r"\b(lower|divide|reduce|decrease)\w*\s+(the\s+|its\s+)?(learning\s+)?rate|\blower it\b",
       *(lower_lr(f) for f in _DECADES)),
    _r("raise the learning rate",
       r"\b(raise|multiply|increase)\w*\s+(the\s+|its\s+)?(learning\s+)?rate|multiply it by|"
       r"\braise it\b",
       *(raise_lr(f) for f in _DECADES)),
    _r("clip the gradient norm", r"\bclip", clip_gradients(1.0)),
    _r("weight decay", r"weight\s+decay", add_weight_decay(1e-3)),
    _r("dropout", r"\bdropout\b", dropout(0.2)),
    _r("stop early", r"\bstop(ping)?\s+early|early\s+stopping|\bstop at the best\b",
       stop_early()),
    _r("ReLU with Kaiming initialisation", r"\brelu\s+with\s+kaiming",
       _both(activation("Sigmoid,Tanh", "ReLU"), reinitialise("kaiming"))),
    _r("Kaiming initialisation", r"\bkaiming\b", reinitialise("kaiming")),
    _r("Xavier initialisation", r"\bxavier\b", reinitialise("xavier")),
    _r("orthogonal recurrent weights", r"\borthogonal", reinitialise("orthogonal")),
    _r("PyTorch's default initialisation",
       r"default\s+(\(kaiming-uniform\)\s+)?init|pytorch's\s+(random\s+)?default",
       reinitialise("default")),
    _r("LeakyReLU", r"leaky\s*relu", activation("ReLU", "LeakyReLU")),
    _r("GELU", r"\bgelu\b", activation("ReLU,Sigmoid,Tanh", "GELU")),
    _r("ReLU instead of a saturating activation",
       r"\brelu\b[^.;]{0,30}\binstead of\b[^.;]{0,10}(sigmoid|tanh)|\buse relu\b",
       activation("Sigmoid,Tanh", "ReLU")),
    _r("normalisation",
       r"\b(add\w*|with)\s+(a\s+)?normali[sz]ation|\bnormali[sz]e\s+inside|\bpre-norm\b",
       normalisation()),
    _r("residual connections", r"\bresidual\s+connection", residual()),
)
#: words of a search over values: try the remedy's edits in turn
SEARCH = re.compile(r"at a time|until|apart|factor of 10", re.I)


#: words of a sentence that names a change to disown it as a fix ("clipping ... caps the
#: gradient as a safety net; it removes no cause")
DISOWNED = re.compile(r"safety net|removes no cause|hides? (a|the) symptom", re.I)


def _disowned_spans(text: str) -> list[tuple[int, int]]:
    """The spans of `text`'s sentences that disown what they name."""
    spans, start = [], 0
    for end in [m.end() for m in re.finditer(r"\.(\s+|$)", text)] + [len(text)]:
        if DISOWNED.search(text[start:end]):
            spans.append((start, end))
        start = end
    return spans


def remedies_in(text: str) -> list[Remedy]:
    """The remedies `text` suggests (in REMEDIES' order); words that overlap an earlier
    remedy's ("Kaiming" in "ReLU with Kaiming initialisation") are that remedy's part, and a
    sentence that disowns what it names (DISOWNED) suggests nothing."""
    taken: list[tuple[int, int]] = _disowned_spans(text)
    out = []
    for remedy in REMEDIES:
        for m in remedy.pattern.finditer(text):
            a, b = m.span()
            if not any(a < d and c < b for c, d in taken):
                taken.append((a, b))
                if remedy not in out:
                    out.append(remedy)
    return out


def suggestions(case: Any, findings: list[Any]) -> dict[str, str]:
    """Every text the course shows a student about the fix of `case`, by where it is shown:
    the report's fix line of each finding of a cause (`findings`: the broken run's), the
    lesson tables' advice on rows that link to the case, the case page's FIX, and the last
    hint (the kind of change)."""
    from lesson.course.learner.clinics import find_clinic_case
    from lesson.sections import case_rows

    out: dict[str, str] = {}
    for f in findings:        # the causes as the report shows them: roots, not followers
        if f.code in case.causes and f.explained_by is None:
            out.setdefault(f"the report's fix line for {f.code}", f.advice)
    for row in case_rows(case.family, case.name):
        for column in ("first thing to try", "fix"):
            if row.get(column):
                out[f"the lesson table's {column!r}"] = row[column]
    out["the case page's FIX"] = case.fix
    out["the last hint"] = find_clinic_case(case.name).hints[-1]
    return out
