"""The course's shared vocabulary: diagnosis codes and the `Finding` that carries one.

Every part of the course speaks in these codes. A broken model in the catalogue *produces*
them, the debugger *finds* them, the checklist and the prompt *explain* them, the exercises
*ask for* them. They are defined here once; everything else imports them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from enum import IntEnum
from typing import Any


class Severity(IntEnum):
    """How urgently a finding needs attention; alerts compare against it."""

    INFO = 10
    WARNING = 20
    ERROR = 30
    CRITICAL = 40


#: Where in the pipeline a code points: the lesson's checklist walks these in order.
AREAS: dict[str, str] = {
    "data": "the data pipeline: inputs, labels, splits, batching",
    "model": "the architecture and its initialisation",
    "loss": "what goes into the loss function",
    "optimizer": "the optimizer, its parameters and its learning rate",
    "training-loop": "the order of calls in the loop: zero_grad, backward, step, train/eval",
    "numerics": "values that stop being finite numbers",
    "gradients": "how gradients flow back through the layers",
    "generalization": "the gap between training and held-out data",
}

#: Which check reveals a code (the tool a student should reach for).
TOOLS: dict[str, str] = {
    "monitor": "NetworkDebugger(model, optimizer, criterion) during training, then diagnose()",
    "overfit": "overfit_one_batch(model, x, y, criterion)",
    "lr_finder": "find_learning_rate(model, x, y, criterion)",
    "gradient_check": "gradient_check_report(model, x, y, criterion)",
    "batch_independence": "check_batch_independence(model, x)",
    "nonfinite": "locate_nonfinite(model, x, y, criterion)",
    "data_validator": "validate_data(x_train, y_train, x_test, y_test)",
    "label_issues": "find_label_issues(model_factory, x, y) and check_labels_carry_signal(...)",
    "causality": "check_causality(model, inputs)",
}


@dataclass(frozen=True)
class Code:
    """One diagnosis: what it means, how to fix it, how bad it is, where and how it is found."""

    name: str
    meaning: str
    fix: str
    severity: Severity
    area: str
    tool: str

    def __post_init__(self) -> None:
        if self.area not in AREAS:
            raise ValueError(f"{self.name}: unknown area {self.area!r}")
        if self.tool not in TOOLS:
            raise ValueError(f"{self.name}: unknown tool {self.tool!r}")


def _code(name: str, meaning: str, fix: str, severity: Severity, area: str, tool: str) -> Code:
    return Code(name, meaning, fix, severity, area, tool)


_S = Severity
#: Every diagnosis code of the course, in the order the checklist teaches them.
CODES: dict[str, Code] = {
    c.name: c
    for c in [
        # -- numerics: the run is already dead ---------------------------------------------
        _code("NAN_OR_INF", "The loss or an activation is NaN or Inf.",
              "Find the first operation that produced it (locate_nonfinite); lower the learning "
              "rate 10x, clip gradients, or make the offending operation numerically safe.",
              _S.CRITICAL, "numerics", "monitor"),
        _code("NONFINITE_INPUT", "The input batch itself already holds NaN or Inf.",
              "Clean the data before training: drop or impute the rows, and assert "
              "torch.isfinite(x).all() in the data pipeline.",
              _S.CRITICAL, "data", "data_validator"),
        _code("LOG_OF_ZERO", "log() was taken of 0 or of a negative number.",
              "Work in log space (F.log_softmax, F.cross_entropy) or clamp probabilities to "
              "[eps, 1 - eps] before log.",
              _S.CRITICAL, "numerics", "nonfinite"),
        _code("EXP_OVERFLOW", "exp() overflowed to Inf (large logits in a hand-written softmax).",
              "Subtract the row maximum before exp (the log-sum-exp trick) or use "
              "torch.softmax / F.log_softmax.",
              _S.CRITICAL, "numerics", "nonfinite"),
        _code("DIVISION_BY_ZERO", "A division by zero (e.g. normalising by a standard deviation "
              "of 0 on a constant batch).",
              "Add an epsilon to the denominator (x / (std + 1e-5)) or use nn.BatchNorm / "
              "nn.LayerNorm, which do.",
              _S.CRITICAL, "numerics", "nonfinite"),
        # -- optimizer and learning rate ------------------------------------------------------
        _code("LR_TOO_HIGH", "Updates overshoot: the loss rises, oscillates or blows up; "
              "update/weight ratios sit far above ~1e-3.",
              "Lower the learning rate 10x at a time until the loss falls steadily "
              "(find_learning_rate sweeps for one).",
              _S.ERROR, "optimizer", "monitor"),
        _code("LR_TOO_LOW", "The loss barely moves while gradients are healthy; "
              "update/weight ratios are tiny.",
              "Raise the learning rate 10x at a time until the loss falls steadily "
              "(find_learning_rate sweeps for one).",
              _S.WARNING, "optimizer", "monitor"),
        _code("LR_DECAYED", "The learning rate has collapsed towards 0 (a scheduler stepped "
              "every batch instead of every epoch, or a decay that is too fast).",
              "Step the scheduler once per epoch (or set its period in batches) and log the "
              "learning rate.",
              _S.ERROR, "optimizer", "monitor"),
        _code("PARAMS_NOT_UPDATED", "Some parameters receive gradients that no optimizer step "
              "applies (optimizer built over other parameters, layers kept in a plain Python "
              "list, zero_grad() called between backward() and step()).",
              "Build the optimizer from model.parameters() after the model is final, register "
              "sub-layers with nn.ModuleList, and call zero_grad() before backward().",
              _S.ERROR, "optimizer", "monitor"),
        # -- training loop ----------------------------------------------------------------------
        _code("MISSING_ZERO_GRAD", "Gradients accumulate across optimizer steps: zero_grad() is "
              "never called.",
              "Call optimizer.zero_grad() once per step, before loss.backward().",
              _S.ERROR, "training-loop", "monitor"),
        # (issue 16: loop faults seen through the gradient bookkeeping)
        _code("ZERO_GRAD_IN_ACCUMULATION", "Gradients are cleared between the backward passes "
              "of one optimizer step (zero_grad() inside a gradient-accumulation loop): only "
              "the last micro-batch counts.",
              "Call optimizer.zero_grad() once per optimizer step, after step(), outside the "
              "loop over micro-batches.",
              _S.ERROR, "training-loop", "monitor"),
        _code("FROZEN_PARAMS_MOVE", "Parameters that receive no gradient still move at the "
              "optimizer step (frozen weights with a zero-filled .grad, moved by momentum or "
              "weight decay).",
              "Let frozen parameters keep .grad None (zero_grad() with its default "
              "set_to_none=True), or leave them out of the optimizer.",
              _S.ERROR, "training-loop", "monitor"),
        _code("EVAL_MODE_DURING_TRAINING", "Dropout or batch norm is in eval mode while the "
              "model trains (model.train() not restored after validation).",
              "Call model.train() at the start of every training epoch.",
              _S.ERROR, "training-loop", "monitor"),
        _code("TRAIN_MODE_DURING_EVAL", "Evaluation passes run with dropout or batch norm still "
              "in training mode (model.eval() forgotten).",
              "Call model.eval() (and use torch.no_grad()) before evaluating; model.train() "
              "afterwards.",
              _S.ERROR, "training-loop", "monitor"),
        _code("NO_GRADIENT", "Trainable parameters never receive a gradient: the graph is cut "
              "inside forward (.detach(), .item(), .numpy(), torch.no_grad()).",
              "Keep forward in torch operations on tensors that require grad; remove the "
              "detach/item/numpy/no_grad on the path to the loss.",
              _S.ERROR, "training-loop", "monitor"),
        # -- loss ---------------------------------------------------------------------------
        _code("DOUBLE_SOFTMAX", "Probabilities (a softmax output) are fed to a loss that "
              "expects logits, such as nn.CrossEntropyLoss.",
              "Remove the softmax from the model's output; CrossEntropyLoss applies "
              "log-softmax itself.",
              _S.ERROR, "loss", "monitor"),
        _code("SOFTMAX_WRONG_DIM", "Softmax is taken over the batch dimension (dim=0) instead "
              "of the class dimension.",
              "Use softmax(dim=-1) (or dim=1 for (N, C) outputs).",
              _S.ERROR, "loss", "monitor"),
        _code("NLL_WITHOUT_LOG_SOFTMAX", "Raw logits are fed to nn.NLLLoss, which expects "
              "log-probabilities.",
              "Add log_softmax(dim=1) before NLLLoss, or use CrossEntropyLoss on the logits.",
              _S.ERROR, "loss", "monitor"),
        _code("LOSS_SHAPE_MISMATCH", "Prediction and target shapes differ, so the loss "
              "broadcasts silently (e.g. (N, 1) against (N,)).",
              "Make the shapes equal before the loss: pred.squeeze(-1) or "
              "target.unsqueeze(-1).",
              _S.ERROR, "loss", "monitor"),
        _code("OUTPUT_RANGE_MISMATCH", "The model's output cannot reach the targets (e.g. a "
              "ReLU or sigmoid on a regression output whose targets are negative).",
              "Match the last layer to the target range: a plain Linear output for "
              "unbounded targets.",
              _S.ERROR, "loss", "monitor"),
        # -- model: activations and initialisation --------------------------------------------
        _code("DEAD_NEURONS", "Most units of a ReLU-family layer output 0 for every sample, "
              "so they pass no gradient.",
              "Dead from the first step: re-initialise (Kaiming, or PyTorch's default init). "
              "Died during training: lower the learning rate, or use LeakyReLU/GELU.",
              _S.ERROR, "model", "monitor"),
        _code("COLLAPSED_ACTIVATIONS", "A layer's output no longer varies across samples: "
              "every input gets the same representation.",
              "Check initialisation and saturation (sigmoid/tanh in deep stacks); add "
              "normalisation or residual connections.",
              _S.ERROR, "model", "monitor"),
        _code("EXPLODING_ACTIVATIONS", "Activations grow without bound from layer to layer "
              "or step to step.",
              "Weights that start too large: a variance-preserving init (Kaiming for ReLU, "
              "Xavier for tanh; orthogonal with gain <= 1 for recurrent weights). Weights at "
              "that scale: normalise inside the network (pre-norm in residual blocks); grown "
              "in training: lower the learning rate.",
              _S.ERROR, "model", "monitor"),
        _code("SYMMETRIC_WEIGHTS", "Units of a layer are identical (constant or zero "
              "initialisation), so they all learn the same thing.",
              "Use random initialisation (PyTorch's default, Kaiming or Xavier); never a "
              "constant.",
              _S.ERROR, "model", "monitor"),
        _code("UNDERFITTING", "The model cannot fit even one batch although its gradients "
              "are healthy: it is too small, or the optimizer is not connected to it.",
              "Check that the optimizer holds model.parameters(); add capacity (a hidden "
              "layer, more units) until one batch can be memorised.",
              _S.ERROR, "model", "overfit"),
        # -- gradients -----------------------------------------------------------------------
        _code("VANISHING_GRADIENT", "Early layers' gradients are orders of magnitude below "
              "the last layers'; the first layers stop learning.",
              "Use ReLU with Kaiming initialisation instead of sigmoid/tanh in deep stacks, or "
              "add residual connections.",
              _S.ERROR, "gradients", "monitor"),
        _code("EXPLODING_GRADIENT", "Gradient norms are huge or grow step over step.",
              "Fix what makes the gradient grow (the finding it follows from: a rate too high, "
              "weights that start too large); clipping (torch.nn.utils.clip_grad_norm_ at the "
              "suggested value) caps it as a safety net.",
              _S.ERROR, "gradients", "monitor"),
        _code("GRADIENT_MISMATCH", "Analytical gradients disagree with numerical ones: the "
              "backward pass has a bug (the evidence names the parameter).",
              "Fix the named parameter's backward formula (a transpose, a sign, a factor); "
              "re-run the gradient check until it passes.",
              _S.CRITICAL, "gradients", "gradient_check"),
        # -- data --------------------------------------------------------------------------
        _code("UNNORMALIZED_INPUTS", "Inputs are far from zero mean and unit scale.",
              "Standardise features with statistics from the training split only: "
              "(x - mean) / std.",
              _S.WARNING, "data", "monitor"),
        _code("UNSHUFFLED_BATCHES", "Batches hold a single class: the data is sorted by label "
              "and not shuffled.",
              "Shuffle the training set every epoch (DataLoader(shuffle=True)).",
              _S.ERROR, "data", "monitor"),
        _code("BATCH_MIXING", "One sample's output depends on another sample's input (a "
              "view/reshape across the batch dimension, softmax over the batch, batch and "
              "time swapped).",
              "Use permute/transpose rather than view to move axes; keep the batch dimension "
              "first and untouched.",
              _S.ERROR, "data", "batch_independence"),
        _code("DUPLICATES_ACROSS_SPLITS", "The same (or nearly the same) samples appear in "
              "the training and the test split: the test score is inflated.",
              "Split first, de-duplicate across splits, then preprocess.",
              _S.ERROR, "data", "data_validator"),
        _code("CLASS_IMBALANCE", "The majority class outnumbers the minority by more than "
              "10:1; accuracy rewards predicting the majority.",
              "Re-weight the loss or resample, and report per-class metrics (balanced "
              "accuracy, F1).",
              _S.WARNING, "data", "data_validator"),
        _code("CONFLICTING_LABELS", "Identical inputs carry different labels.",
              "Resolve the conflicts at the source (relabel or drop), then retrain.",
              _S.WARNING, "data", "data_validator"),
        _code("LABEL_NOISE", "A share of labels is wrong: confident learning finds samples "
              "the model confidently assigns to another class.",
              "Review and relabel the flagged samples (highest-ranked first), or train with a "
              "noise-robust loss.",
              _S.WARNING, "data", "label_issues"),
        _code("LABELS_SHUFFLED", "Labels carry no signal about their inputs (shuffled or "
              "misaligned): held-out balanced accuracy stays at chance while training loss "
              "falls, or the loss never gets below that of predicting each label at its "
              "frequency.",
              "Check that inputs and labels are indexed and shuffled together (one "
              "permutation for both).",
              _S.CRITICAL, "data", "label_issues"),
        # -- sequence models and language models (issue 29) -----------------------------------
        _code("CAUSAL_LEAK", "An output position depends on inputs after it (the causal mask "
              "is missing, wrong, or too weak): the model reads the token it must predict, so "
              "the training loss falls below what the data allows and generation fails.",
              "Mask the future: is_causal=True in F.scaled_dot_product_attention, "
              "mask=nn.Transformer.generate_square_subsequent_mask(T) (or is_causal=True) for "
              "nn.TransformerEncoder/MultiheadAttention, scores.masked_fill(future, "
              "float('-inf')) before softmax in hand-written attention (never a small "
              "negative number); then check_causality(model, x) must come back empty.",
              _S.ERROR, "model", "causality"),
        _code("TARGETS_NOT_SHIFTED", "Next-token targets are not the inputs shifted by one: "
              "equal to them (the model learns to copy the token it is given and the loss "
              "falls to about 0), or shifted twice (the model learns the token after next).",
              "Shift once: feed tokens[:, :-1] and compare the logits with tokens[:, 1:] "
              "(inputs drop the last token, targets the first); a model that shifts its labels "
              "itself (Hugging Face's LM heads) takes labels equal to input_ids, unshifted.",
              _S.ERROR, "loss", "monitor"),
        _code("PADDING_IN_LOSS", "The targets hold the padding id and the loss does not ignore "
              "it: the model is trained to predict padding, the loss looks better than the real "
              "tokens' and they are learnt worse.",
              "Pass ignore_index=pad_id to nn.CrossEntropyLoss / F.cross_entropy (or set the "
              "padded targets to -100, the default ignore_index), or weight the token losses "
              "by the padding mask.",
              _S.ERROR, "loss", "monitor"),
        _code("PADDING_MASK_INVERTED", "The key padding mask masks the real tokens and keeps "
              "the padding (key_padding_mask / src_key_padding_mask are True at the padding; "
              "an attention_mask is 1 at the real tokens): every token attends to padding only.",
              "Build key_padding_mask = (tokens == pad_id), True at the padding; an HF-style "
              "attention_mask is (tokens != pad_id).long(). Do not pass one convention where "
              "the other is expected.",
              _S.ERROR, "model", "monitor"),
        _code("ATTENTION_ON_PADDING", "Attention puts mass on padded keys: no key padding mask "
              "is given where the batch holds padding, so each output mixes in pad tokens and "
              "depends on how much padding its batch got.",
              "Pass key_padding_mask=(tokens == pad_id) (src_key_padding_mask to "
              "nn.TransformerEncoder, an attn_mask to F.scaled_dot_product_attention), or fill "
              "the scores of padded keys with -inf before softmax.",
              _S.ERROR, "model", "monitor"),
        _code("ATTENTION_SATURATED", "Attention rows are sharp from the start (their entropy "
              "is far below a uniform row's): the scores are not scaled by 1/sqrt(d), softmax "
              "saturates and passes almost no gradient, so learning is slow or stuck.",
              "Divide the scores by math.sqrt(head_dim): (q @ k.transpose(-2, -1)) / "
              "math.sqrt(q.shape[-1]) (F.scaled_dot_product_attention does it for you).",
              _S.ERROR, "model", "monitor"),
        _code("PADDED_POSITION_READ", "A padded batch is read at a position that is padding "
              "for some rows (out[:, -1] on right-padded sequences): those rows are summarised "
              "by the state after their padding, not after their last real token.",
              "Read each row at its own last real position, out[torch.arange(B), lengths - 1], "
              "or pack the batch (nn.utils.rnn.pack_padded_sequence) and use h_n, or pool "
              "with the padding mask.",
              _S.ERROR, "model", "monitor"),
        _code("ACCUMULATION_UNWEIGHTED_MEAN", "Gradient accumulation averages per-micro-batch "
              "mean losses over micro-batches with different token counts: the mean of means "
              "weights a token of a short micro-batch more than one of a long one, so the step "
              "is not the gradient of the mean over its tokens.",
              "Sum the token losses (reduction='sum') over the step's micro-batches and divide "
              "by the step's number of target tokens (padding excluded), or weight each "
              "micro-batch's mean by its token count over the step's total.",
              _S.WARNING, "training-loop", "monitor"),
        _code("WARMUP_MISSING", "The loss blows up in the first steps at a peak learning rate "
              "that trains once warmed up, or the first full-size updates leave the model "
              "stalled at the entropy of the targets' own frequencies (it ignores its input): "
              "post-LN transformers are unstable at their full learning rate from step 0.",
              "Ramp the learning rate up over the first steps (torch.optim.lr_scheduler."
              "LinearLR(optimizer, start_factor=0.01, total_iters=warmup_steps), stepped every "
              "batch), or use pre-LN blocks (norm_first=True).",
              _S.ERROR, "optimizer", "monitor"),
        _code("UNTIED_WEIGHTS", "Two parameters that start as equal copies (an embedding and "
              "an output head meant to be tied) are trained apart: the head does not share what "
              "the embedding learns, and the model holds twice the parameters.",
              "Tie them by sharing one Parameter, head.weight = embedding.weight (after both "
              "exist, before the optimizer is built), instead of copying its values.",
              _S.WARNING, "model", "monitor"),
        _code("GENERATION_ON_PADDING", "Generation feeds the model padding it never saw "
              "unmasked in training (prompts padded and conditioned on pad tokens): what it "
              "generates depends on how much padding the prompt got.",
              "Generate from each prompt's real tokens: left-pad and pass the padding mask "
              "(and positions counted from the first real token) at generation too, or "
              "generate each prompt unpadded.",
              _S.ERROR, "data", "monitor"),
        # -- generalisation ------------------------------------------------------------------
        _code("OVERFITTING", "Validation loss rises while training loss keeps falling: the "
              "model memorises the training set.",
              "Add data or augmentation, weight decay, dropout, or stop early at the best "
              "validation loss.",
              _S.WARNING, "generalization", "monitor"),
    ]
}


def layer_of(param_name: str) -> str:
    """The layer (module name) a parameter name points at: `fc1` for `fc1.weight`, and for a
    parametrized weight (`weight_norm`, `spectral_norm`: `fc1.parametrizations.weight.original0`)
    the module that holds the parametrization, `fc1`. "" at the root."""
    head, sep, _ = param_name.partition("parametrizations.")
    if sep and (not head or head.endswith(".")):
        return head.rstrip(".")
    return param_name.rpartition(".")[0]


@dataclass
class Finding:
    """One diagnosis of one run: a code, what was seen, where, the numbers, and the fix."""

    code: str
    message: str
    layer: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    advice: str = ""
    step: int | None = None
    #: the code of the finding of the same run that explains this one (see EXPLAINS), if any
    explained_by: str | None = None
    #: the codes of the findings this one explains
    explains: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown diagnosis code {self.code!r}; known: {', '.join(CODES)}")
        if not self.advice:
            self.advice = CODES[self.code].fix

    @property
    def severity(self) -> Severity:
        return CODES[self.code].severity

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (evidence values must already be plain numbers or strings)."""
        return asdict(self) | {"explains": list(self.explains), "severity": self.severity.name}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Finding":
        keys = {"code", "message", "layer", "evidence", "advice", "step", "explained_by"}
        return cls(**{k: v for k, v in data.items() if k in keys},
                   explains=tuple(data.get("explains", ())))

    def __str__(self) -> str:
        where = f" [{self.layer}]" if self.layer else ""
        return f"{self.code}{where}: {self.message}"


#: cause -> the codes it can produce downstream. A missing zero_grad() makes the summed
#: gradients grow, which reads as a learning rate too high, then as exploding gradients and NaN;
#: it also leaves a frozen parameter its last gradient, which the optimizer keeps applying.
#: Some pairs go both ways (a too-high rate blows activations up; blown-up activations make the
#: loss climb as a too-high rate does): within one run, the one seen first explains the other.
EXPLAINS: dict[str, tuple[str, ...]] = {
    # an unsafe operation, or NaN in the data: the NaN loss the debugger sees follows
    "NONFINITE_INPUT": ("NAN_OR_INF",),
    "LOG_OF_ZERO": ("NAN_OR_INF",),
    "EXP_OVERFLOW": ("NAN_OR_INF",),
    "DIVISION_BY_ZERO": ("NAN_OR_INF",),
    "PARAMS_NOT_UPDATED": ("MISSING_ZERO_GRAD", "EXPLODING_GRADIENT"),
    "MISSING_ZERO_GRAD": ("LR_TOO_HIGH", "EXPLODING_GRADIENT", "EXPLODING_ACTIVATIONS",
                          "NAN_OR_INF", "FROZEN_PARAMS_MOVE"),
    "UNNORMALIZED_INPUTS": ("EXPLODING_ACTIVATIONS", "EXPLODING_GRADIENT", "LR_TOO_HIGH",
                            "NAN_OR_INF", "DEAD_NEURONS"),
    "SYMMETRIC_WEIGHTS": ("COLLAPSED_ACTIVATIONS",),
    "VANISHING_GRADIENT": ("COLLAPSED_ACTIVATIONS",),
    # units that output 0 for every sample leave the layers after them a constant input
    "DEAD_NEURONS": ("COLLAPSED_ACTIVATIONS",),
    "LOSS_SHAPE_MISMATCH": ("DEAD_NEURONS",),
    "OUTPUT_RANGE_MISMATCH": ("DEAD_NEURONS",),
    "NLL_WITHOUT_LOG_SOFTMAX": ("EXPLODING_ACTIVATIONS",),
    # a softmax over the batch normalises a validation batch of another size differently, so
    # validation reads as if the labels carried no signal
    "SOFTMAX_WRONG_DIM": ("LABELS_SHUFFLED",),
    # targets that do not follow the inputs leave the layers that read the inputs gradients
    # that cancel out over a batch: only the output's bias learns (the targets' frequencies)
    "LABELS_SHUFFLED": ("VANISHING_GRADIENT",),
    # a rate decayed to nothing takes steps that move nothing
    "LR_DECAYED": ("PARAMS_NOT_UPDATED",),
    "LR_TOO_HIGH": ("NAN_OR_INF", "EXPLODING_GRADIENT", "EXPLODING_ACTIVATIONS", "DEAD_NEURONS"),
    "EXPLODING_ACTIVATIONS": ("EXPLODING_GRADIENT", "NAN_OR_INF", "LR_TOO_HIGH", "DEAD_NEURONS"),
    "EXPLODING_GRADIENT": ("NAN_OR_INF", "LR_TOO_HIGH"),
    # sequence models (issue 29). A mask the wrong way round leaves each token the padding to
    # attend to, and a row without padding no key at all: softmax over -inf only is NaN, and
    # over a finite mask value (finfo.min) uniform over every key, the future ones included
    "PADDING_MASK_INVERTED": ("ATTENTION_ON_PADDING", "NAN_OR_INF", "CAUSAL_LEAK"),
    # a saturated softmax passes almost no gradient to the queries and keys below it, and the
    # run crawls as if its rate were too low; a summary read through one-hot rows copies one
    # value (its own, the same for every input) and the output stops varying
    "ATTENTION_SATURATED": ("VANISHING_GRADIENT", "LR_TOO_LOW", "COLLAPSED_ACTIVATIONS"),
    # without warm-up the first steps at the peak rate are the steps of a rate too high: they
    # blow the stack up, kill units, and leave a model that outputs the same for every input;
    # a post-LN stack so broken passes its first layers almost no gradient
    "WARMUP_MISSING": ("LR_TOO_HIGH", "EXPLODING_GRADIENT", "EXPLODING_ACTIVATIONS",
                       "NAN_OR_INF", "DEAD_NEURONS", "COLLAPSED_ACTIVATIONS",
                       "VANISHING_GRADIENT"),
    # out[:, -1] of outputs cut to the batch's longest row reads a position that the batch's
    # longest row decides: each row's answer depends on the other rows' lengths
    "PADDED_POSITION_READ": ("BATCH_MIXING",),
}


def _explains(a: Finding, b: Finding) -> bool:
    """Does finding `a` explain finding `b` of the same run?"""
    if b.code not in EXPLAINS.get(a.code, ()):
        return False
    if a.code not in EXPLAINS.get(b.code, ()):
        return True
    first = lambda f: (f.step if f.step is not None else -1)  # noqa: E731 (None: from the start)
    if first(a) != first(b):
        return first(a) < first(b)
    return list(EXPLAINS).index(a.code) < list(EXPLAINS).index(b.code)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Cause first: findings nothing else explains, then what they explain (EXPLAINS), each
    group by severity and then the teaching order of the codes. The findings come back as
    copies linked to each other (`explained_by`, `explains`)."""
    order = {name: i for i, name in enumerate(CODES)}
    plain = sorted((replace(f, explained_by=None, explains=()) for f in findings),
                   key=lambda f: (-f.severity, order[f.code]))
    depth: dict[int, int] = {}     # the longest chain of explanations above each finding
    explainer: dict[int, int] = {}
    for _ in plain:                # a DAG within one run, but bounded all the same
        changed = False
        for i, b in enumerate(plain):
            options = [(depth.get(j, 0), -j) for j, a in enumerate(plain)
                       if j != i and _explains(a, b) and explainer.get(j) != i]
            if options:
                d, j = max(options)
                if depth.get(i) != d + 1 or explainer.get(i) != -j:
                    depth[i], explainer[i], changed = d + 1, -j, True
        if not changed:
            break
    for i, j in explainer.items():
        plain[i].explained_by = plain[j].code
        plain[j].explains = tuple(dict.fromkeys((*plain[j].explains, plain[i].code)))
    # A consequence cannot come before its cause: a cause whose rule needed more records to
    # decide (a vanishing gradient judged at step 50) was there when its consequence was seen
    # (collapsed activations at step 8), so it is dated from then, deepest links first.
    for i in sorted(explainer, key=lambda k: -depth.get(k, 0)):
        cause, seen = plain[explainer[i]], plain[i].step
        if cause.step is not None and seen is not None and seen < cause.step:
            cause.step = seen
    ranked = sorted(range(len(plain)), key=lambda i: (depth.get(i, 0), -plain[i].severity,
                                                       order[plain[i].code]))
    return [plain[i] for i in ranked]
