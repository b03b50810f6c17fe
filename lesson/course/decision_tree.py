"""The checklist's decision tree: from what you see, through what to look at, to a diagnosis code.

A tree of `Node`s. An inner node asks a question; each child is one answer. A leaf ends at a
diagnosis code from `lesson.findings.CODES` (whose fix is printed beside it) or at an action
(what to do next when no code applies yet). `outputs/skill-debug-checklist.md` is rendered from
this tree by `python -m lesson.course.artifacts`, so the checklist cannot drift from the codes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from lesson.findings import CODES


@dataclass(frozen=True)
class Node:
    """A question with answers (`children`), or a leaf that ends at `code` or `action`."""

    text: str
    children: tuple["Node", ...] = ()
    code: str | None = None
    action: str | None = None

    def __post_init__(self) -> None:
        if self.children and (self.code or self.action):
            raise ValueError(f"{self.text!r}: a question cannot also end at a code or action")
        if not self.children and not (self.code or self.action):
            raise ValueError(f"{self.text!r}: a leaf must end at a code or an action")
        if self.code is not None and self.code not in CODES:
            raise ValueError(f"{self.text!r}: unknown diagnosis code {self.code!r}")

    def leaves(self) -> Iterator["Node"]:
        if not self.children:
            yield self
        for child in self.children:
            yield from child.leaves()


def _q(text: str, *children: Node) -> Node:
    return Node(text, children=children)


def _c(text: str, code: str) -> Node:
    return Node(text, code=code)


def _a(text: str, action: str) -> Node:
    return Node(text, action=action)


#: The symptoms a user reports, each the root of one branch, in the order the lesson treats them.
TREE: tuple[Node, ...] = (
    _q("The loss is NaN or Inf",
       _c("The input batch already holds NaN or Inf (`torch.isfinite(x).all()` is False)",
          "NONFINITE_INPUT"),
       _q("The inputs are finite: run `locate_nonfinite(model, x, y, criterion)` on the batch "
          "where the loss first went bad. The first non-finite value came from",
          _c("a `log` of 0 or of a negative number", "LOG_OF_ZERO"),
          _c("an `exp` of large logits (a softmax written by hand)", "EXP_OVERFLOW"),
          _c("a division by a standard deviation or a count that was 0", "DIVISION_BY_ZERO"),
          _q("no single operation: values grew over several steps first",
             _c("the loss rose or jumped around before it broke, update/weight ratios "
                "far above 1e-3", "LR_TOO_HIGH"),
             _c("gradient norms grew step over step before the loss broke",
                "EXPLODING_GRADIENT"),
             _c("activations grew layer by layer before the loss broke",
                "EXPLODING_ACTIVATIONS"),
             _c("a post-LN transformer at its full learning rate from step 0 broke in its "
                "first steps", "WARMUP_MISSING"),
             _a("none of these", "keep the finding the debugger reports, NAN_OR_INF, and "
                "rerun the failing step under `torch.autograd.detect_anomaly()` to get the "
                "backward operation that made it"))),
       _c("The debugger reports a non-finite loss and you have not looked further yet",
          "NAN_OR_INF")),
    _q("The loss does not go down",
       _q("It rises, oscillates or jumps",
          _c("update/weight ratios far above 1e-3; a 10x smaller learning rate calms it",
             "LR_TOO_HIGH"),
          _c("gradient norms are huge or grow step over step", "EXPLODING_GRADIENT"),
          _c("gradient norms grow every step although the loss is small: `.grad` is never "
             "cleared", "MISSING_ZERO_GRAD"),
          _c("a post-LN transformer at its full learning rate from step 0 jumps up in its "
             "first steps, and trains with a warm-up", "WARMUP_MISSING")),
       _q("It stays flat (or nearly): first look at the gradients",
          _c("some trainable parameters have `.grad` None after `backward()`", "NO_GRADIENT"),
          _c("parameters have gradients but do not change after `optimizer.step()`",
             "PARAMS_NOT_UPDATED"),
          _c("it falls, but slowly: gradients are accumulated over micro-batches and "
             "`zero_grad()` runs inside that loop", "ZERO_GRAD_IN_ACCUMULATION"),
          _c("layers frozen with `requires_grad_(False)` still change at every step "
             "(their `.grad` is zero-filled, not None)", "FROZEN_PARAMS_MOVE"),
          _c("the logged learning rate has fallen towards 0", "LR_DECAYED"),
          _c("most units of a ReLU layer output 0 for every sample", "DEAD_NEURONS"),
          _c("the first layers' gradients are orders of magnitude below the last layers'",
             "VANISHING_GRADIENT"),
          _c("all units of a layer have identical weights (constant or zero init)",
             "SYMMETRIC_WEIGHTS"),
          _c("a layer's output is the same for every sample", "COLLAPSED_ACTIVATIONS"),
          _q("the gradients look healthy",
             _c("update/weight ratios are tiny (below ~1e-5)", "LR_TOO_LOW"),
             _c("the model cannot overfit one batch of 8-32 samples", "UNDERFITTING"),
             _c("a regression output passes through ReLU or sigmoid but targets are "
                "negative or beyond 1", "OUTPUT_RANGE_MISMATCH"),
             _c("inputs are far from zero mean and unit scale", "UNNORMALIZED_INPUTS"),
             _a("none of these", "go to 'The loss looks wrong from the first step'")))),
    _q("The loss looks wrong from the first step (for classification, compare the first loss "
       "with -log(1/num_classes))",
       _c("the model ends in softmax and the loss is `nn.CrossEntropyLoss`; the loss cannot "
          "fall far below its start", "DOUBLE_SOFTMAX"),
       _c("each column of the softmax output sums to 1 instead of each row",
          "SOFTMAX_WRONG_DIM"),
       _c("the model ends in a softmax over a single output unit: every prediction is exactly 1",
          "COLLAPSED_ACTIVATIONS"),
       _c("`nn.NLLLoss` is negative or unbounded below: it gets raw logits",
          "NLL_WITHOUT_LOG_SOFTMAX"),
       _c("prediction and target shapes differ ((N, 1) against (N,)) and the loss broadcasts",
          "LOSS_SHAPE_MISMATCH"),
       _c("the first loss is far above -log(1/num_classes) and inputs are large",
          "UNNORMALIZED_INPUTS"),
       _c("the first loss is far above -log(1/num_classes) and activations grow layer by layer",
          "EXPLODING_ACTIVATIONS"),
       _a("the first loss is where it should be", "go to 'The loss does not go down' or "
          "'The loss goes down but the model is bad'")),
    _q("The loss goes down but the model is bad",
       _c("validation loss rises while training loss keeps falling", "OVERFITTING"),
       _c("validation accuracy stays at chance while training loss falls", "LABELS_SHUFFLED"),
       _c("the test score is suspiciously high: test samples also sit in the training set",
          "DUPLICATES_ACROSS_SPLITS"),
       _c("accuracy looks good but the minority class is never predicted (ratio above 10:1)",
          "CLASS_IMBALANCE"),
       _c("identical inputs carry different labels", "CONFLICTING_LABELS"),
       _c("confident learning ranks many samples as belonging to another class",
          "LABEL_NOISE"),
       _c("evaluation scores change from run to run on the same data: dropout or batch norm "
          "is still in training mode", "TRAIN_MODE_DURING_EVAL"),
       _c("training after the first validation pass behaves differently: dropout is off, "
          "batch norm uses running statistics", "EVAL_MODE_DURING_TRAINING"),
       _c("the training loss zigzags epoch by epoch; each batch holds one class",
          "UNSHUFFLED_BATCHES"),
       _c("a sample's prediction changes when the other samples of its batch change",
          "BATCH_MIXING"),
       _a("none of these", "print five random samples with their labels and look at them; "
          "then run `validate_data` and `find_label_issues`")),
    _q("A sequence or language model (attention, an RNN, next-token prediction)",
       _q("The training loss falls below what the data allows (near 0 on text, under the "
          "data's entropy), yet the model generates badly",
          _c("the targets are the inputs themselves, not shifted by one: the model copies",
             "TARGETS_NOT_SHIFTED"),
          _c("`check_causality(model, x)` finds an output that depends on later inputs: the "
             "causal mask is missing, wrong or too weak", "CAUSAL_LEAK"),
          _c("the targets hold the padding id and the loss does not ignore it",
             "PADDING_IN_LOSS")),
       _q("The loss stays at chance or crawls",
          _c("the key padding mask is True on the real tokens (or an attention_mask 1 on "
             "the padding)", "PADDING_MASK_INVERTED"),
          _c("attention rows are sharp (far from uniform) from the first step: the scores "
             "are not divided by sqrt(d)", "ATTENTION_SATURATED"),
          _c("a post-LN transformer at its full learning rate from step 0 drops in its "
             "first steps to what a model blind to its context gets (the tokens' frequencies) "
             "and stays there; the same peak rate trains after a warm-up", "WARMUP_MISSING"),
          _c("an RNN or a transformer without batch_first reads (batch, time) as (time, "
             "batch): a sample's output depends on the other samples", "BATCH_MIXING"),
          _c("the labels are shifted twice (by the collate step and again by a model that "
             "shifts them itself): the model is asked for the token after next",
             "TARGETS_NOT_SHIFTED")),
       _q("The results depend on the padding or on how the batch was cut",
          _c("attention puts weight on padded keys: no key padding mask is given",
             "ATTENTION_ON_PADDING"),
          _c("a right-padded batch is summarised at `out[:, -1]`: short rows are read at "
             "their padding", "PADDED_POSITION_READ"),
          _c("gradient accumulation averages the mean losses of micro-batches with "
             "different token counts", "ACCUMULATION_UNWEIGHTED_MEAN"),
          _c("generated text changes with the prompt's padding: generation feeds pad tokens "
             "without their mask", "GENERATION_ON_PADDING")),
       _c("an embedding and an output head meant to be tied drift apart during training",
          "UNTIED_WEIGHTS")),
    _q("You wrote a backward pass yourself (`autograd.Function`, your own framework)",
       _c("`gradient_check_report` flags a parameter", "GRADIENT_MISMATCH"),
       _a("the gradient check passes", "the backward is right; go back to the symptom you "
          "see and start from its branch")),
)


def leaves() -> Iterator[Node]:
    """Every leaf of the whole tree, depth first."""
    for root in TREE:
        yield from root.leaves()


def codes_in_tree() -> set[str]:
    return {leaf.code for leaf in leaves() if leaf.code}
