"""The capstone: a small GPT program with three bugs, found and fixed one at a time.

The program (`broken_models.capstone.train_broken`) trains a character-level GPT on the
shipped public-domain text, evaluates it and samples from it. Three bugs of the sequence
family hide in it. The first hides the second (with the targets unshifted there is no
next-token run for the causality probe to check); the third, in the sampler, is named from
the first report on, below the first cause. The student reads the report, names the cause it
puts first, repairs the program, runs it again, until the report is empty.

The grade gives points per bug: one for each cause named (in any order), two for each bug the
repaired program no longer has, three for the program that is healthy on seeds the student
has not seen. Each bug is judged by what the repaired program does, not by how it is written:
the debugger's findings and the program's own measurements (a causality probe, greedy samples
made alone and in a batch), with the program's measuring lines and set-up kept as they were.
"""
from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass
from typing import Any, Callable

from lesson.course.learner.harness import harness_lines
from lesson.course.learner.repair import trained_setup
from lesson.course.learner.run_setup import RunSetup, setup_changes

#: the seed of the visible tests, then the hidden tests' (unseen)
VISIBLE_SEED = 0
HIDDEN_SEEDS = (5, 11)
#: a healthy program's held-out loss per character: above what reading the answer gives,
#: below the 2.9 nats of predicting each character by its frequency alone
VAL_LOSS_RANGE = (1.0, 2.7)


@dataclass(frozen=True)
class Bug:
    """One bug of the program: the code of its cause, the codes it also produces (true of the
    run, but not the diagnosis), and how a run shows it is gone."""

    code: str
    consequences: tuple[str, ...]
    gone: Callable[[dict[str, Any], list[str]], bool]


def _targets_gone(metrics: dict[str, Any], codes: list[str]) -> bool:
    # and the model predicts the next character better than frequencies alone (a shift by
    # two, say, removes the finding but not the bug)
    return "TARGETS_NOT_SHIFTED" not in codes and metrics["val_loss"] < VAL_LOSS_RANGE[1]


def _leak_gone(metrics: dict[str, Any], codes: list[str]) -> bool:
    return "CAUSAL_LEAK" not in codes and metrics["causality_findings"] == 0


def _padding_gone(metrics: dict[str, Any], codes: list[str]) -> bool:
    return "GENERATION_ON_PADDING" not in codes and metrics["samples_alone_agree"] == 1.0


#: the bugs in the order the debugger names them
BUGS: tuple[Bug, ...] = (
    Bug("TARGETS_NOT_SHIFTED", (), _targets_gone),
    Bug("CAUSAL_LEAK", (), _leak_gone),
    Bug("GENERATION_ON_PADDING", (), _padding_gone),
)


def _program() -> Any:
    import broken_models.capstone

    return broken_models.capstone


def program_source(which: str = "broken", name: str = "broken_gpt") -> str:
    """The program's source (the broken one, or the fixed one), its function named `name`."""
    fn = {"broken": _program().train_broken, "fixed": _program().train_fixed}.get(which)
    if fn is None:
        raise ValueError(f"which must be 'broken' or 'fixed', got {which!r}")
    source = textwrap.dedent(inspect.getsource(fn))
    return source.replace(f"def {fn.__name__}(", f"def {name}(", 1)


def show_program(into: dict[str, Any] | None = None) -> None:
    """Print the program as `broken_gpt(seed)`; with `into` (the notebook's `globals()`),
    define it there with the helpers it uses, to run and to copy."""
    print(program_source())
    if into is not None:
        module = _program()
        into.update({k: v for k, v in vars(module).items()
                     if not k.startswith("__") and k not in ("train_broken", "train_fixed")})
        into["broken_gpt"] = module.train_broken


@dataclass(frozen=True)
class Verdict:
    """What one named code is to this program."""

    code: Any
    kind: str          # "cause", "consequence", "unrelated", "not a code", "repeated"
    message: str


def judge_causes(causes: Any) -> list[Verdict]:
    """One verdict per code in `causes` (a list of codes, in the order found): a cause of the
    program (which one is not said), a consequence, a code unrelated to it, or not a code."""
    from lesson.findings import CODES

    if isinstance(causes, str) or not isinstance(causes, (list, tuple)):
        return [Verdict(causes, "not a code", "causes is a list of codes, such as "
                        "[\"NAN_OR_INF\"], in the order the debugger named them")]
    out, seen = [], set()
    for code in causes:
        text = code.strip().upper() if isinstance(code, str) else code
        if not isinstance(text, str) or text not in CODES:
            out.append(Verdict(code, "not a code", f"{code!r} is not a code of lesson.CODES "
                               "(codes are upper case, such as \"NAN_OR_INF\")"))
        elif text in seen:
            out.append(Verdict(text, "repeated", f"{text} is named twice"))
        elif any(text == bug.code for bug in BUGS):
            out.append(Verdict(text, "cause", f"{text} is one of the program's bugs"))
        elif any(text in bug.consequences for bug in BUGS):
            out.append(Verdict(text, "consequence", f"{text} is true of the run, but it is a "
                               "consequence of a bug, not its cause"))
        else:
            out.append(Verdict(text, "unrelated", f"{text} is not what is wrong in this "
                               "program: read the report again"))
        seen.add(text)
    return out


def cause_found(causes: Any, number: int) -> bool:
    """Whether `causes` names the cause of bug `number` (1-based, in the debugger's order),
    with at most as many codes as the program has bugs."""
    verdicts = judge_causes(causes)
    named = {v.code for v in verdicts if v.kind == "cause"}
    return len(verdicts) <= len(BUGS) and BUGS[number - 1].code in named


@dataclass
class ProgramRun:
    """One run of a version of the program: what its debugger found, what it measured."""

    seed: int
    codes: list[str]
    metrics: dict[str, Any]
    changed: list[str]          # measuring lines or set-up the repair changed

    def bug_gone(self, number: int) -> bool:
        return not self.changed and BUGS[number - 1].gone(self.metrics, self.codes)

    @property
    def healthy(self) -> bool:
        low, high = VAL_LOSS_RANGE
        return (not self.changed and not self.codes and low <= self.metrics["val_loss"] <= high
                and all(self.bug_gone(n) for n in range(1, len(BUGS) + 1)))

    def summary(self) -> str:
        m = self.metrics
        return (f"seed {self.seed}: findings {self.codes or 'none'}; held-out loss "
                f"{m['val_loss']:.3f} per character (a healthy program: "
                f"{VAL_LOSS_RANGE[0]}-{VAL_LOSS_RANGE[1]})"
                + (f"; changed: {self.changed}" if self.changed else ""))


def _kept_lines(source: str) -> list[str]:
    """The lines of the program the bugs are not in, which a repair keeps word for word: its
    configuration block, every line that measures (the debugger's), and everything from the
    evaluation on."""
    lines = [ln.strip() for ln in source.splitlines()]
    config = next(i for i, ln in enumerate(lines) if ln.startswith("# -- configuration"))
    seeded = next(i for i, ln in enumerate(lines) if ln.startswith("torch.manual_seed"))
    evaluation = next(i for i, ln in enumerate(lines) if ln.startswith("# -- evaluation"))
    kept = lines[config + 1:seeded] + harness_lines(source) + lines[evaluation + 1:]
    return [ln for ln in dict.fromkeys(kept) if ln and not ln.startswith("#")]


def changes(repair: Callable[..., Any]) -> list[str]:
    """The lines the bugs are not in (`_kept_lines`) that the repair's source lacks ([] when
    it keeps them all)."""
    try:
        mine = inspect.getsource(repair)
    except (OSError, TypeError) as exc:
        return [f"cannot read the repair's source: {exc}"]
    lines = {ln.strip() for ln in mine.splitlines()}
    return [f"keep: {ln}" for ln in _kept_lines(program_source()) if ln not in lines]


def _key(fn: Callable[..., Any], seed: int) -> tuple[str, int]:
    try:
        return inspect.getsource(fn), seed
    except (OSError, TypeError):
        return repr(fn), seed


#: (source, seed) -> the outcome of one training and the set-up it trained with
_trained: dict[tuple[str, int], tuple[Any, RunSetup]] = {}


def _train(fn: Callable[..., Any], seed: int) -> tuple[Any, RunSetup]:
    key = _key(fn, seed)
    if key not in _trained:
        _trained[key] = trained_setup(fn, seed)
    return _trained[key]


def setup_changed(setup: RunSetup, seed: int) -> list[str]:
    """What a run's set-up changed from the fixed program's on the visible seed (its fix
    changes no setting: the bugs are in none), in words: a rate, the number of steps,
    clipping, the model's size, the seed, layers added."""
    _, reference = _train(_program().train_fixed, VISIBLE_SEED)
    return [c.says for c in setup_changes(reference, reference, setup,
                                          seeds=(VISIBLE_SEED, VISIBLE_SEED, seed))]


_runs: dict[tuple[str, int], ProgramRun] = {}


def run_program(repair: Callable[..., Any], seed: int) -> ProgramRun:
    """Train the repaired program on `seed` and judge it; one training per source and seed
    (the tests of several bugs share it)."""
    from broken_models.case import Outcome, check_seed

    check_seed(seed)
    key = _key(repair, seed)
    if key not in _runs:
        changed = changes(repair)
        outcome, setup = _train(repair, seed)
        if not isinstance(outcome, Outcome):
            raise TypeError(f"the program must return an Outcome, got {type(outcome).__name__}")
        codes = list(dict.fromkeys(f.code for f in outcome.findings))
        _runs[key] = ProgramRun(seed, codes, dict(outcome.metrics),
                                changed + setup_changed(setup, seed))
    return _runs[key]
