"""nndebug's reference debugger: the tools that the lesson "Debugging Neural Networks" teaches.

The public names load lazily, so `import lesson` stays fast and each tool pulls in only what it
needs (plots need matplotlib, sinks need tensorboard or wandb).
"""
from __future__ import annotations

import importlib
from typing import Any

from lesson.findings import CODES, Code, Finding, Severity

#: public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "NetworkDebugger": "lesson.debugger.monitor",
    "demo_broken_networks": "lesson.course.demo",
    "overfit_one_batch": "lesson.checks.overfit",
    "find_learning_rate": "lesson.checks.lr_finder",
    "gradient_check": "lesson.checks.gradcheck",
    "gradient_check_report": "lesson.checks.gradcheck",
    "numerical_gradient_check": "lesson.checks.gradcheck",
    "check_batch_independence": "lesson.checks.batch_independence",
    "check_causality": "lesson.checks.causality",
    "locate_nonfinite": "lesson.data.nonfinite",
    "validate_data": "lesson.data.validate",
    "find_label_issues": "lesson.data.labels",
    "check_labels_carry_signal": "lesson.data.labels",
    "preflight": "lesson.course.preflight",
    "plot_gradient_flow": "lesson.production.plots",
    "plot_activations": "lesson.production.plots",
    "plot_loss": "lesson.production.plots",
    # result types of the active checks and data checks
    "OverfitResult": "lesson.checks.overfit",
    "LRFinderResult": "lesson.checks.lr_finder",
    "GradientCheckReport": "lesson.checks.gradcheck",
    "LabelIssues": "lesson.data.labels",
    "out_of_sample_probs": "lesson.data.labels",
    # the inspectors the debugger feeds (usable on their own)
    "LossInputInspector": "lesson.debugger.loss_inputs",
    "BatchInspector": "lesson.debugger.batches",
    # production: sinks and alerts for NetworkDebugger(log_every=..., sinks=..., alerts=...)
    "JSONLSink": "lesson.production.sinks",
    "TensorBoardSink": "lesson.production.sinks",
    "WandbSink": "lesson.production.sinks",
    "read_jsonl": "lesson.production.sinks",
    "NonFiniteLossAlert": "lesson.production.alerts",
    "DeadUnitsAlert": "lesson.production.alerts",
    "ExplodingGradientAlert": "lesson.production.alerts",
    "FindingAlert": "lesson.production.alerts",
    "TrainingAlert": "lesson.production.alerts",
    "default_alerts": "lesson.production.alerts",
}

__all__ = ["CODES", "Code", "Finding", "Severity", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lesson' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
