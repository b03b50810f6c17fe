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
    "NetworkDebugger": "lesson.monitor",
    "demo_broken_networks": "lesson.demo",
    "overfit_one_batch": "lesson.overfit",
    "find_learning_rate": "lesson.lr_finder",
    "gradient_check": "lesson.gradcheck",
    "gradient_check_report": "lesson.gradcheck",
    "numerical_gradient_check": "lesson.gradcheck",
    "check_batch_independence": "lesson.batch_independence",
    "locate_nonfinite": "lesson.nonfinite",
    "validate_data": "lesson.data",
    "find_label_issues": "lesson.labels",
    "check_labels_carry_signal": "lesson.labels",
    "preflight": "lesson.preflight",
    "plot_gradient_flow": "lesson.plots",
    "plot_activations": "lesson.plots",
    "plot_loss": "lesson.plots",
    # result types of the active checks and data checks
    "OverfitResult": "lesson.overfit",
    "LRFinderResult": "lesson.lr_finder",
    "GradientCheckReport": "lesson.gradcheck",
    "LabelIssues": "lesson.labels",
    "out_of_sample_probs": "lesson.labels",
    # the inspectors the debugger feeds (usable on their own)
    "LossInputInspector": "lesson.loss_inputs",
    "BatchInspector": "lesson.batches",
    # production: sinks and alerts for NetworkDebugger(log_every=..., sinks=..., alerts=...)
    "JSONLSink": "lesson.sinks",
    "TensorBoardSink": "lesson.sinks",
    "WandbSink": "lesson.sinks",
    "read_jsonl": "lesson.sinks",
    "NonFiniteLossAlert": "lesson.alerts",
    "DeadUnitsAlert": "lesson.alerts",
    "ExplodingGradientAlert": "lesson.alerts",
    "FindingAlert": "lesson.alerts",
    "TrainingAlert": "lesson.alerts",
    "default_alerts": "lesson.alerts",
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
