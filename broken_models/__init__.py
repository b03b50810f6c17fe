"""The catalogue of broken networks: each one runs, prints a loss, and is silently wrong.

`CATALOGUE` maps a case's name to its `Case`, in teaching order (family by family, as the
lesson meets the symptoms). Every case page lives in `broken_models/<family>/<name>.py`.

    >>> from broken_models import CATALOGUE
    >>> case = CATALOGUE["missing_zero_grad"]
    >>> run = case.run_broken(seed=0)      # run.findings, run.metrics, run.symptom_seen
    >>> case.evaluate(my_repair, seed=0).healthy
"""
from __future__ import annotations

import importlib

from broken_models.case import FAMILIES, Case, Outcome, Run

#: "<family>.<name>" of every case page, in teaching order
PAGES: tuple[str, ...] = (
    # Symptom 1: the loss does not decrease
    "not_learning.lr_too_high",
    "not_learning.lr_too_low",
    "not_learning.dead_relu",
    "not_learning.vanishing_sigmoid",
    "not_learning.exploding_deep",
    "not_learning.residual_without_norm",
    "not_learning.exploding_rnn",
    "not_learning.missing_zero_grad",
    "not_learning.zero_grad_after_backward",
    "not_learning.zero_grad_in_accumulation",
    "not_learning.optimizer_before_new_head",
    "not_learning.layers_in_python_list",
    "not_learning.detach_in_forward",
    "not_learning.scheduler_every_batch",
    "not_learning.zero_init",
    "not_learning.unnormalized_inputs",
    "not_learning.linear_model_on_xor",
    # Symptom 3: NaN or Inf
    "nan_inf.log_of_zero",
    "nan_inf.softmax_overflow",
    "nan_inf.batchnorm_without_eps",
    "nan_inf.nan_rows",
    "nan_inf.adam_lr_one",
    # Symptom 2: the loss decreases but the model is bad
    "bad_model.overfitting",
    "bad_model.test_rows_in_train",
    "bad_model.label_noise",
    "bad_model.labels_shuffled",
    "bad_model.class_imbalance",
    "bad_model.eval_forgotten",
    "bad_model.train_not_restored",
    "bad_model.sorted_by_label",
    "bad_model.conflicting_labels",
    # Common PyTorch bugs
    "pytorch.double_softmax",
    "pytorch.softmax_dim0",
    "pytorch.mse_shape_mismatch",
    "pytorch.nll_on_logits",
    "pytorch.relu_on_regression_output",
    "pytorch.view_across_batch",
    "pytorch.softmax_single_output",
    "pytorch.frozen_layer_moves",
    # Backward bugs
    "backward.custom_function_transpose",
    "backward.miniframework_transpose",
    # Sequence and language models
    "sequence.no_causal_mask",
    "sequence.window_looks_ahead",
    "sequence.targets_not_shifted",
    "sequence.padding_in_loss",
    "sequence.padding_mask_inverted",
    "sequence.no_padding_mask",
    "sequence.gru_last_step",
    "sequence.encoder_batch_first",
    "sequence.attention_unscaled",
    "sequence.post_ln_no_warmup",
    "sequence.accumulation_mean_of_means",
    "sequence.untied_embeddings",
    "sequence.generation_on_padding",
)


def _load(pages: tuple[str, ...]) -> dict[str, Case]:
    catalogue: dict[str, Case] = {}
    for page in pages:
        case = Case.from_module(importlib.import_module(f"{__name__}.{page}"))
        if case.name in catalogue:
            raise ValueError(f"two cases are named {case.name!r}")
        catalogue[case.name] = case
    return catalogue


_catalogue: dict[str, Case] | None = None


def __getattr__(name: str) -> object:
    # The pages load on first use of CATALOGUE, so `import broken_models.case` stays light.
    global _catalogue
    if name == "CATALOGUE":
        if _catalogue is None:
            _catalogue = _load(PAGES)
        return _catalogue
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_case(name: str) -> Case:
    """The case called `name`, or a ValueError that lists the names there are."""
    catalogue = __getattr__("CATALOGUE")
    if name not in catalogue:
        raise ValueError(f"no case named {name!r}; cases: {', '.join(catalogue)}")
    return catalogue[name]


def by_family(family: str | None = None) -> dict[str, list[Case]]:
    """The cases grouped by family (in teaching order), optionally only one family."""
    if family is not None and family not in FAMILIES:
        raise ValueError(f"no family named {family!r}; families: {', '.join(FAMILIES)}")
    groups: dict[str, list[Case]] = {f: [] for f in FAMILIES if family in (None, f)}
    for case in __getattr__("CATALOGUE").values():
        if case.family in groups:
            groups[case.family].append(case)
    return groups


__all__ = ["CATALOGUE", "FAMILIES", "PAGES", "Case", "Outcome", "Run", "by_family", "get_case"]
