"""What a case of the catalogue is, and how one is run and judged.

A case is one page of the catalogue: a module under `broken_models/<family>/<name>.py` that holds
a broken training script, the same script with the bug fixed, and a few lines of metadata:

    TITLE, SYMPTOM, EXPECTED, CAUSES, CONSEQUENCES, TOOL, LESSON, FIX, TARGET, REFERENCE (optional)
    SYMPTOM_CHECK, TARGET_CHECK       # the symptom and the target as bounds on the metrics

LESSON is the exact heading of the lesson's section the case illustrates (lesson/README.md).

EXPECTED are the codes the tool must report on the broken script. CAUSES are the codes that name
the bug itself (any of them is a right diagnosis); CONSEQUENCES the codes the bug also produces
downstream (a blow-up seen as LR_TOO_HIGH, say): they are explained, not wrong findings, but
naming one as the diagnosis names a consequence, not the cause. SYMPTOM_CHECK (is the symptom a
user would notice there?) and TARGET_CHECK (did the run learn what it should?) are
`broken_models.checks` bounds: each says whether a run meets it and by what margin.
    train_broken(seed) -> Outcome     # the buggy script
    train_fixed(seed) -> Outcome      # the same script, with only the bug changed

A training function returns an `Outcome`: its metrics and the findings of the tool named by
TOOL (by default `debugger.diagnose()` of the NetworkDebugger that watched it).
`Case.evaluate(train_fn, seed)` runs any function with that signature (the broken script, the
fixed one, or a student's repair) and judges it into a `Run`.
"""
from __future__ import annotations

import difflib
import inspect
import re
import math
import time
import warnings
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from broken_models.checks import Check, safe_margin
from lesson.findings import CODES, TOOLS, Finding, sort_findings
from lesson.sections import sections

#: family (the sub-package name) -> the symptom a user reports, in teaching order
FAMILIES: dict[str, str] = {
    "not_learning": "The loss does not decrease",
    "nan_inf": "NaN or Inf in the loss",
    "bad_model": "The loss decreases but the model is bad",
    "pytorch": "Common PyTorch bugs",
    "backward": "Bugs in the backward pass",
    "sequence": "Sequence and language models",
}

#: the kinds of set-up change a repair can make (the clinics' repair judgement names them);
#: a case page's REAL_FIXES lists those that fix its bug although its own fix does not make
#: them (weight decay for overfitting). Each with what it does when the cause is elsewhere.
SETUP_CHANGES: dict[str, str] = {
    "lr_lowered": "a lower learning rate slows the run down until the symptom does not show "
                  "within it",
    "lr_raised": "a higher learning rate can push the run past a symptom",
    "fewer_steps": "fewer steps end the run before the symptom shows",
    "more_steps": "more steps can outlast a symptom",
    "clipping": "clipping caps the gradient the bug produces",
    "weight_decay": "weight decay pulls back the weights the bug inflates",
    "optimizer_swapped": "another optimizer can step around a symptom",
    "optimizer_setting": "another optimizer setting can step around a symptom",
    "smaller_model": "a smaller model gives the bug less room to show",
    "larger_model": "a larger model can absorb a symptom",
    "seed": "another seed only draws a luckier start",
    "dropout": "dropout adds noise that can mask a symptom",
    "normalisation": "normalisation rescales what the bug distorts",
    "activation": "another activation can route around a symptom",
}

#: metric keys in words, for the target's report ("validation accuracy 0.78")
METRIC_WORDS: dict[str, str] = {
    "val_accuracy": "validation accuracy", "train_accuracy": "training accuracy",
    "final_loss": "final training loss", "first_loss": "first training loss",
    "val_mse": "validation mean squared error", "losses": "training losses",
    "rare_recall": "recall of the rare class", "balanced_accuracy": "balanced accuracy",
    "clean_val_accuracy": "accuracy on rows never trained on",
    "val_answers_changed": "validation answers that changed between evaluations",
    "frozen_change": "change of the frozen layer", "val_losses": "validation losses",
    # sequence models (broken_models/tokens.py)
    "train_loss": "training loss at the end", "floor": "the data's entropy floor",
    "val_loss": "held-out loss", "val_floor": "the floor of those held-out tokens",
    "generated_impossible": "share of impossible transitions in generated text",
    "val_answers_moved": "mean move of the validation class probabilities",
    "head_embedding_difference": "relative difference of the head and the embedding",
    "teacher_forced_accuracy": "teacher-forced accuracy", "generated_accuracy": "generated accuracy",
}

#: the module-level fields of a case page: its card, never part of the script itself
PAGE_FIELDS = frozenset({"TITLE", "SYMPTOM", "EXPECTED", "CAUSES", "CONSEQUENCES", "TOOL", "LESSON",
                         "FIX", "TARGET", "REFERENCE", "SYMPTOM_CHECK", "TARGET_CHECK",
                         "REAL_FIXES", "EVIDENCE", "CHANGE"})


@dataclass
class Outcome:
    """What a training function hands back: its numbers and what the tool found.

    `metrics` holds plain numbers (and `losses`, the training-loss curve); `findings` defaults to
    `debugger.diagnose()` when a debugger is given; `report` keeps an active check's own result
    (an LR-finder curve, a gradient-check table) for the clinic's plots.
    """

    metrics: dict[str, Any]
    debugger: Any = None
    findings: list[Finding] | None = None
    report: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.metrics, dict):
            raise TypeError(f"metrics must be a dict, got {type(self.metrics).__name__}")
        if self.findings is None:
            if self.debugger is None:
                raise ValueError("give the findings, or the NetworkDebugger that watched training")
            self.findings = list(self.debugger.diagnose())
        for f in self.findings:
            if not isinstance(f, Finding):
                raise TypeError(f"findings must be lesson.Finding objects, got {type(f).__name__}")


@dataclass
class Run:
    """One training run of a case, judged against the case's card."""

    case: str
    seed: int
    which: str                      # "broken", "fixed" or "custom"
    findings: list[Finding]
    metrics: dict[str, Any]
    symptom_seen: bool
    target_reached: bool
    expected: tuple[str, ...]
    secondary: tuple[str, ...]      # explained too: the case's causes and consequences
    seconds: float
    debugger: Any = field(default=None, repr=False)
    report: Any = field(default=None, repr=False)
    symptom_margin: float = math.nan   # how far past its threshold the symptom check is
    target_margin: float = math.nan    # (positive: it holds; the check's own units)

    @property
    def codes(self) -> list[str]:
        """The distinct codes found, most important first."""
        seen: dict[str, None] = {}
        for f in sort_findings(self.findings):
            seen.setdefault(f.code, None)
        return list(seen)

    @property
    def missing(self) -> list[str]:
        """Expected codes the tool did not report."""
        return [c for c in self.expected if c not in self.codes]

    @property
    def unexplained(self) -> list[str]:
        """Codes found that the case neither expects nor allows as secondary."""
        allowed = set(self.expected) | set(self.secondary)
        return [c for c in self.codes if c not in allowed]

    @property
    def healthy(self) -> bool:
        """No finding at all, and the target metric reached: what a fix must achieve."""
        return not self.findings and self.target_reached

    @property
    def diagnosed(self) -> bool:
        """Every expected code found, and nothing the case cannot explain."""
        return not self.missing and not self.unexplained


TrainFn = Callable[[int], Outcome]

MAX_SEED = 2**32 - 1
"""The largest seed every generator the scripts use accepts (NumPy's limit)."""


def check_seed(seed: Any) -> int:
    """`seed` if it is a whole number in [0, MAX_SEED]; else a TypeError or ValueError saying why
    (a negative seed would crash NumPy inside the script and look like a misdiagnosis)."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be between 0 and {MAX_SEED}, got {seed}")
    return seed


@dataclass(frozen=True)
class Case:
    """One bug of the catalogue: its card, its two scripts, and how to judge a run."""

    name: str
    title: str
    family: str
    symptom: str
    expected: tuple[str, ...]
    causes: tuple[str, ...]
    consequences: tuple[str, ...]
    tool: str
    lesson: str
    fix: str
    target: str
    train_broken: TrainFn = field(repr=False)
    train_fixed: TrainFn = field(repr=False)
    symptom_check: Check = field(repr=False)
    target_check: Check = field(repr=False)
    reference: str | None = None
    module: str = ""
    #: set-up changes (SETUP_CHANGES) that are real fixes of this bug too
    real_fixes: tuple[str, ...] = ()
    #: hint 2: which output of the tool to read, and what to look for in it
    evidence: str = ""
    #: hint 3: the kind of change the fix needs, never its value
    change: str = ""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"{self.name}: unknown family {self.family!r}")
        if self.tool not in TOOLS:
            raise ValueError(f"{self.name}: unknown tool {self.tool!r}; known: {', '.join(TOOLS)}")
        if self.lesson not in sections():
            raise ValueError(f"{self.name}: LESSON {self.lesson!r} is not a heading of the "
                             f"lesson (lesson/README.md); its headings: {', '.join(sections())}")
        if not self.expected:
            raise ValueError(f"{self.name}: a case must expect at least one code")
        for code in (*self.expected, *self.causes, *self.consequences):
            if code not in CODES:
                raise ValueError(f"{self.name}: unknown diagnosis code {code!r}")
        if not self.causes or set(self.causes) & set(self.consequences):
            raise ValueError(f"{self.name}: CAUSES must be non-empty and apart from CONSEQUENCES")
        if not set(self.expected) <= set(self.causes) | set(self.consequences):
            raise ValueError(f"{self.name}: every EXPECTED code is a cause or a consequence")
        unknown = [k for k in self.real_fixes if k not in SETUP_CHANGES]
        if unknown:
            raise ValueError(f"{self.name}: REAL_FIXES {unknown} are not kinds of set-up change; "
                             f"known: {', '.join(SETUP_CHANGES)}")
        for which in ("symptom_check", "target_check"):
            if not isinstance(getattr(self, which), Check):
                raise TypeError(f"{self.name}: {which} must be a broken_models.checks.Check, "
                                f"got {type(getattr(self, which)).__name__}")

    @property
    def secondary(self) -> tuple[str, ...]:
        """Codes the case explains beyond the expected ones (causes and consequences)."""
        return tuple(c for c in (*self.causes, *self.consequences) if c not in self.expected)

    @classmethod
    def from_module(cls, module: ModuleType) -> "Case":
        """Read a case page: name and family come from where the module lives."""
        *_, family, name = module.__name__.split(".")
        return cls(
            name=name, family=family, title=module.TITLE, symptom=module.SYMPTOM,
            expected=tuple(module.EXPECTED), causes=tuple(module.CAUSES),
            consequences=tuple(module.CONSEQUENCES),
            tool=module.TOOL, lesson=module.LESSON, fix=module.FIX, target=module.TARGET,
            train_broken=module.train_broken, train_fixed=module.train_fixed,
            symptom_check=_page_check(module, "SYMPTOM_CHECK", "symptom_seen"),
            target_check=_page_check(module, "TARGET_CHECK", "target_reached"),
            reference=getattr(module, "REFERENCE", None), module=module.__name__,
            real_fixes=tuple(getattr(module, "REAL_FIXES", ())),
            evidence=getattr(module, "EVIDENCE", ""), change=getattr(module, "CHANGE", ""),
        )

    # -- running -------------------------------------------------------------------------------
    def run_broken(self, seed: int = 0) -> Run:
        """Train the broken script and judge it."""
        return self._judge(self.train_broken, seed, "broken")

    def run_fixed(self, seed: int = 0) -> Run:
        """Train the fixed script and judge it."""
        return self._judge(self.train_fixed, seed, "fixed")

    def evaluate(self, train_fn: TrainFn, seed: int = 0) -> Run:
        """Run any training function with the scripts' signature exactly as `run_fixed` does,
        and judge it (exercises grade a student's repair with this: `run.healthy`)."""
        if not callable(train_fn):
            raise TypeError(f"train_fn must be a function of the seed, got {type(train_fn).__name__}")
        which = {self.train_broken: "broken", self.train_fixed: "fixed"}.get(train_fn, "custom")
        return self._judge(train_fn, seed, which)

    def _judge(self, train_fn: TrainFn, seed: int, which: str) -> Run:
        check_seed(seed)
        start = time.perf_counter()
        with warnings.catch_warnings():  # the broken scripts trip torch warnings on purpose
            warnings.simplefilter("ignore")
            outcome = train_fn(seed)
        seconds = time.perf_counter() - start
        if not isinstance(outcome, Outcome):
            raise TypeError(f"{getattr(train_fn, '__name__', 'train_fn')} must return an "
                            f"Outcome(metrics, debugger=..., findings=...), "
                            f"got {type(outcome).__name__}")
        metrics = outcome.metrics
        return Run(
            case=self.name, seed=seed, which=which, findings=sort_findings(outcome.findings),
            metrics=metrics, symptom_seen=_safe(self.symptom_check, metrics),
            target_reached=_safe(self.target_check, metrics),
            expected=self.expected, secondary=self.secondary, seconds=seconds,
            debugger=outcome.debugger, report=outcome.report,
            symptom_margin=safe_margin(self.symptom_check, metrics),
            target_margin=safe_margin(self.target_check, metrics),
        )

    def target_report(self, metrics: dict[str, Any]) -> str:
        """Whether the run reached the target, with the value of everything it reads:
        "missed: validation accuracy 0.7777 (needs >= 0.9)"."""
        reached = _safe(self.target_check, metrics)
        try:
            values = self.target_check.values(metrics)
        except (KeyError, TypeError, ValueError, ArithmeticError, IndexError) as exc:
            values = f"the metrics lack what the target reads ({type(exc).__name__}: {exc})"
        for key, words in METRIC_WORDS.items():
            values = re.sub(rf"\b{key}\b", words, values)
        return f"{'reached' if reached else 'missed'}: {values}"

    # -- reading -------------------------------------------------------------------------------
    def source(self, which: str = "broken") -> str:
        """The source of the broken or the fixed training function."""
        fn = {"broken": self.train_broken, "fixed": self.train_fixed}.get(which)
        if fn is None:
            raise ValueError(f"which must be 'broken' or 'fixed', got {which!r}")
        return inspect.getsource(fn)

    def diff(self) -> str:
        """The unified diff from the broken script to the fixed one: the bug, and only it."""
        broken = self.source("broken").replace("def train_broken(", "def train(")
        fixed = self.source("fixed").replace("def train_fixed(", "def train(")
        return "".join(difflib.unified_diff(
            broken.splitlines(keepends=True), fixed.splitlines(keepends=True),
            fromfile=f"{self.name} (broken)", tofile=f"{self.name} (fixed)"))


def _page_check(module: ModuleType, field_name: str, legacy: str) -> Check:
    """The page's measurable check; a page written before checks had margins (a yes/no function
    `symptom_seen(metrics)`) still loads, its check without a margin."""
    check = getattr(module, field_name, None)
    if check is not None:
        return check
    fn = getattr(module, legacy, None)
    if not callable(fn):
        raise AttributeError(f"{module.__name__}: declare {field_name} (see broken_models.checks)")
    return YesNo(fn)


@dataclass(frozen=True)
class YesNo(Check):
    """A check given as a yes/no function of the metrics: it has no margin (nan)."""

    fn: Callable[[dict[str, Any]], bool]

    def holds(self, metrics: dict[str, Any]) -> bool:
        return bool(self.fn(metrics))

    def margin(self, metrics: dict[str, Any]) -> float:
        return math.nan

    def describe(self) -> str:
        return getattr(self.fn, "__name__", "a yes/no check")

    def values(self, metrics: dict[str, Any]) -> str:
        return f"{self.describe()}: {self.holds(metrics)}"


def _safe(check: Callable[[dict[str, Any]], bool], metrics: dict[str, Any]) -> bool:
    """A check on NaN metrics is False, not an exception."""
    try:
        return bool(check(metrics))
    except (KeyError, TypeError, ValueError, ArithmeticError):
        return False
