"""preflight: the lesson's seven checks before full training, in order, stopping at the first
that fails; healthy models pass; the caller's model and random state are untouched."""
from __future__ import annotations

import json
import textwrap

import pytest
import torch
from torch import nn

from lesson.course import cli
from lesson.course.preflight import CHECKS, as_tensors, model_summary, preflight

FAST = {"overfit_steps": 150, "train_steps": 40}


def blobs(n: int = 256, features: int = 10, classes: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, features, generator=g) * 2
    y = torch.randint(0, classes, (n,), generator=g)
    x = centres[y] + torch.randn(n, features, generator=g)
    return (x - x.mean(0)) / x.std(0), y                    # standardised, as data should be


def mlp(features: int = 10, classes: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(features, 32), nn.ReLU(), nn.Linear(32, classes))


def test_a_healthy_classifier_passes_all_seven_checks():
    x, y = blobs()
    report = preflight(mlp(), (x, y), nn.CrossEntropyLoss(), **FAST)
    assert report.passed, str(report)
    assert [c.name for c in report.checks] == [name for name, _ in CHECKS]
    assert report.findings == []
    forward = report["forward"].details
    assert forward["output_shape"] == [32, 3] and forward["num_classes"] == 3
    assert abs(forward["first_loss"] - forward["expected_first_loss"]) < 0.5
    training = report["training"].details
    assert training["last_losses_mean"] < 0.9 * training["first_losses_mean"]
    assert len(report["data"].lines) == 5                 # five random samples with labels
    assert "7. a look at the data" in str(report) and "PASS" in str(report)


def test_a_healthy_regression_model_passes():
    torch.manual_seed(1)
    x = torch.randn(256, 4)
    y = (x @ torch.tensor([1.0, -2.0, 0.5, 3.0])).unsqueeze(1) + 0.05 * torch.randn(256, 1)
    model = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))
    report = preflight(model, (x, y), nn.MSELoss(),
                       lambda p: torch.optim.Adam(p, lr=1e-2), **FAST)
    assert report.passed, str(report)
    assert "num_classes" not in report["forward"].details


def test_the_callers_model_and_random_state_are_untouched():
    x, y = blobs()
    model = mlp()
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    preflight(model, (x, y), nn.CrossEntropyLoss(), **FAST)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert not model.training
    assert torch.equal(rng, torch.get_rng_state())


def test_summary_counts_parameters_per_layer():
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
    model[0].bias.requires_grad_(False)
    rows = model_summary(model)
    assert [(r["layer"], r["parameters"], r["trainable"]) for r in rows] == [
        ("0", 352, 320), ("2", 99, 99)]


def test_unnormalised_inputs_stop_at_the_forward_pass():
    """Adam still overfits one batch of inputs scaled by 1000, but the first loss is far above
    -log(1/C): check 3 fails, naming the inputs."""
    x, y = blobs()
    report = preflight(mlp(), (x * 1000, y), nn.CrossEntropyLoss(), **FAST)
    assert [c.passed for c in report.checks] == [True, True, False]
    assert report.failed.name == "forward"
    assert "UNNORMALIZED_INPUTS" in [f.code for f in report.failed.findings]
    assert report.failed.details["first_loss"] > 3 * report.failed.details["expected_first_loss"]
    assert "not run" in str(report)


def test_dead_relus_stop_at_the_first_check():
    x, y = blobs()
    model = mlp()
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Linear):
                m.weight.fill_(-1.0)
                m.bias.fill_(-5.0)
    report = preflight(model, (x, y), nn.CrossEntropyLoss(), **FAST)
    assert len(report.checks) == 1 and report.failed.name == "overfit"
    assert report.failed.findings and report.failed.details["final_loss"] > 0.5


def test_a_learning_rate_far_too_high_stops_the_short_training():
    x, y = blobs()
    report = preflight(mlp(), (x, y), nn.CrossEntropyLoss(),
                       lambda p: torch.optim.SGD(p, lr=50.0), **FAST)
    assert report.failed is not None and report.failed.name == "training", str(report)
    assert {"LR_TOO_HIGH", "NAN_OR_INF"} & {f.code for f in report.failed.findings}


def test_all_checks_run_when_asked():
    x, y = blobs()
    report = preflight(mlp(), (x * 1000, y), nn.CrossEntropyLoss(),
                       stop_at_first_failure=False, **FAST)
    assert len(report.checks) == 7 and not report.passed
    assert report.failed.name == "forward"


def test_image_samples_are_saved_as_a_picture(tmp_path):
    torch.manual_seed(0)
    y = torch.randint(0, 2, (128,))
    x = torch.randn(128, 1, 8, 8) + y.view(-1, 1, 1, 1).float()
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 2))
    path = tmp_path / "samples.png"
    report = preflight(model, (x, y), nn.CrossEntropyLoss(), samples_path=path, **FAST)
    assert report.passed, str(report)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["data"].details["picture"] == str(path)


def test_data_as_a_dataset_or_a_loader():
    x, y = blobs(100)
    dataset = torch.utils.data.TensorDataset(x, y)
    for data in (dataset, torch.utils.data.DataLoader(dataset, batch_size=10, shuffle=True)):
        xs, ys, batched = as_tensors(data)
        assert xs.shape == (100, 10) and ys.shape == (100,)
        assert batched == isinstance(data, torch.utils.data.DataLoader)


def test_a_loader_sorted_by_label_is_reported():
    x, y = blobs(512, classes=2)
    order = torch.argsort(y)
    loader = [(x[order][i:i + 32], y[order][i:i + 32]) for i in range(0, 512, 32)]
    report = preflight(mlp(classes=2), loader, nn.CrossEntropyLoss(), **FAST)
    assert report.failed is not None and report.failed.name == "data", str(report)
    assert "UNSHUFFLED_BATCHES" in [f.code for f in report.failed.findings]


@pytest.mark.slow
def test_labels_without_signal_are_caught_when_asked():
    """Shuffled labels: one batch is still memorised (check 1 passes), the short training cannot
    fall, and the label check names the cause instead of guessing the learning rate."""
    x, y = blobs(256, classes=2)
    shuffled = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(3))]
    report = preflight(mlp(classes=2), (x, shuffled), nn.CrossEntropyLoss(), label_signal=True,
                       **FAST)
    assert report["overfit"].passed
    assert report.failed is not None and report.failed.name == "training", str(report)
    assert [f.code for f in report.failed.findings] == ["LABELS_SHUFFLED"]
    assert preflight(mlp(classes=2), (x, y), nn.CrossEntropyLoss(), label_signal=True,
                     **FAST).passed


@pytest.mark.parametrize("call, error", [
    (lambda: preflight("model", (torch.zeros(4, 2), torch.zeros(4)), nn.MSELoss()), TypeError),
    (lambda: preflight(nn.Linear(2, 1), (torch.zeros(4, 2), torch.zeros(3)), nn.MSELoss()),
     ValueError),
    (lambda: preflight(nn.Linear(2, 1), (torch.zeros(4, 2), torch.zeros(4)), "mse"), TypeError),
    (lambda: preflight(nn.Linear(2, 1), (torch.zeros(4, 2), torch.zeros(4)), nn.MSELoss(),
                       train_steps=0), ValueError),
    (lambda: preflight(nn.Linear(2, 1), "data", nn.MSELoss()), TypeError),
    (lambda: preflight(nn.Linear(2, 1).requires_grad_(False), (torch.zeros(4, 2), torch.zeros(4)),
                       nn.MSELoss()), ValueError),
])
def test_bad_input_gets_a_clear_error(call, error):
    with pytest.raises(error):
        call()


FACTORY = """
import torch
from torch import nn

def build():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (128,), generator=g)
    x = torch.randn(128, 6, generator=g) + 2 * y.unsqueeze(1).float() - 1
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    return model, (x, y), nn.CrossEntropyLoss()

def build_scaled():
    model, (x, y), loss = build()
    return {"model": model, "data": (x * 1000, y), "loss": loss, "overfit_steps": 150}

def build_nothing():
    return 42
"""


def test_command_line_runs_a_users_factory(tmp_path, capsys):
    file = tmp_path / "my_model.py"
    file.write_text(textwrap.dedent(FACTORY), encoding="utf-8")
    out_json = tmp_path / "result.json"
    report_json = tmp_path / "report.json"
    assert cli.main(["preflight", f"{file}:build", "--steps", "40", "--json", str(out_json)]) == 0
    assert "all 7 checks passed" in capsys.readouterr().out
    assert json.loads(out_json.read_text())["passed"] is True
    assert cli.main(["preflight", f"{file}:build_scaled", "--steps", "40",
                     "--report-json", str(report_json)]) == 1
    assert "stopped at check 3" in capsys.readouterr().out
    assert cli.main(["report", str(report_json)]) == 0
    assert "`UNNORMALIZED_INPUTS`" in capsys.readouterr().out
    assert cli.main(["preflight", f"{file}:build_nothing"]) == 2
    assert cli.main(["preflight", f"{file}:missing"]) == 2
    assert cli.main(["preflight", "no_colon_here"]) == 2
    assert "expected path/to/file.py:function" in capsys.readouterr().err


# -- the catalogue -------------------------------------------------------------------------------
#: the check at which preflight stops each broken case whose bug lives in the model, the loss,
#: the data or the optimizer's settings (python -m lesson.course.preflight_catalogue prints the table)
#: exploding_rnn may stop at either of two: the broken RNN fits its 16 samples on gradients of
#: 1e7, so whether it memorises them turns on the CPU's float rounding (the overfit check on
#: one AMD EPYC, the forward pass on CI's machine; EXPLODING_GRADIENT is named at both)
STOPS = {
    "lr_too_high": "training", "lr_too_low": "training", "dead_relu": "overfit",
    "vanishing_sigmoid": "overfit", "exploding_deep": "forward", "residual_without_norm": "forward",
    "exploding_rnn": ("overfit", "forward"), "layers_in_python_list": "overfit", "detach_in_forward": "overfit",
    "zero_init": "overfit", "unnormalized_inputs": "forward", "linear_model_on_xor": "overfit",
    "log_of_zero": "training", "softmax_overflow": "training", "batchnorm_without_eps": "overfit",
    "nan_rows": "forward", "adam_lr_one": "training", "labels_shuffled": "data",
    "class_imbalance": "data", "sorted_by_label": "data", "conflicting_labels": "data",
    "double_softmax": "overfit", "softmax_dim0": "overfit", "mse_shape_mismatch": "overfit",
    "nll_on_logits": "overfit", "relu_on_regression_output": "overfit",
    "view_across_batch": "overfit", "softmax_single_output": "overfit",
    "padding_mask_inverted": "overfit", "no_padding_mask": "activations",
    "gru_last_step": "overfit", "encoder_batch_first": "data", "attention_unscaled": "activations",
}
#: where preflight stops but does not name the bug: strict expected failures, kept visible
KNOWN_GAPS = {"lr_too_high": "the overfit check fails at the script's rate with UNDERFITTING "
                             "alone; LR_TOO_HIGH is not named there"}
#: language models whose targets are flattened per token ((batch x time,) against a batch of
#: rows): preflight samples whole rows and refuses them with a clear error
TOKEN_TARGETS = ("no_causal_mask", "window_looks_ahead", "targets_not_shifted", "padding_in_loss",
                 "post_ln_no_warmup", "accumulation_mean_of_means", "untied_embeddings",
                 "generation_on_padding")
#: options a case needs (the label check costs two short trainings, so it is opt-in)
OPTIONS = {"labels_shuffled": {"label_signal": True}}
#: cases whose bug is outside what preflight is given: its own loop is correct (zero_grad,
#: train/eval modes, optimizer built from the final model, no scheduler), it sees no held-out
#: split, it does not check gradients numerically, or the model is not a torch module
OUT_OF_REACH = {
    "missing_zero_grad": "training loop", "zero_grad_after_backward": "training loop",
    "optimizer_before_new_head": "training loop", "scheduler_every_batch": "training loop",
    "eval_forgotten": "evaluation loop", "train_not_restored": "training loop",
    "overfitting": "needs the validation curve", "test_rows_in_train": "needs the test split",
    "label_noise": "needs confident learning over k folds (find_label_issues)",
    "custom_function_transpose": "a wrong backward formula: the gradient check's job",
    "zero_grad_in_accumulation": "training loop", "frozen_layer_moves": "training loop",
}
#: cases preflight cannot run: their script trains no torch module under a NetworkDebugger
NOT_CAPTURED = {"miniframework_transpose": "the NumPy mini-framework"}


def catalogue_names() -> list[str]:
    from broken_models import CATALOGUE

    return list(CATALOGUE)


def test_every_catalogue_case_has_a_declared_preflight_outcome():
    undeclared = (set(catalogue_names()) - set(STOPS) - set(OUT_OF_REACH) - set(NOT_CAPTURED)
                  - set(TOKEN_TARGETS))
    assert not undeclared, f"declare where preflight stops: {sorted(undeclared)}"


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN_GAPS[n],
                                                                    strict=True))
                                  if n in KNOWN_GAPS else n for n in sorted(STOPS)])
def test_preflight_stops_at_the_first_failing_check_of_a_broken_case(name):
    from lesson.course.preflight_catalogue import preflight_case

    report = preflight_case(name, seed=0, **OPTIONS.get(name, {}))
    assert report is not None and report.failed is not None, f"{name}: preflight passed"
    stops = STOPS[name] if isinstance(STOPS[name], tuple) else (STOPS[name],)
    assert report.failed.name in stops, str(report)
    assert report.checks[-1] is report.failed                # it stopped there
    assert all(c.passed for c in report.checks[:-1])
    from broken_models import CATALOGUE

    case = CATALOGUE[name]
    named = {f.code for f in report.failed.findings}       # and names the case's bug
    assert named & set(case.expected + case.secondary), (name, named)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OUT_OF_REACH))
def test_loop_bugs_are_out_of_preflights_reach(name):
    from lesson.course.preflight_catalogue import preflight_case

    assert preflight_case(name, seed=0).passed


@pytest.mark.slow
@pytest.mark.parametrize("name", TOKEN_TARGETS)
def test_token_targets_are_refused_with_a_clear_error(name):
    from lesson.course.preflight_catalogue import preflight_case

    with pytest.raises(ValueError, match="inputs and targets differ in length"):
        preflight_case(name, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NOT_CAPTURED))
def test_cases_without_a_torch_model_are_not_captured(name):
    from lesson.course.preflight_catalogue import inputs_from_case

    assert inputs_from_case(name) is None


def test_command_line_runs_a_catalogue_case(capsys):
    assert cli.main(["preflight", "--case", "nan_rows"]) == 1
    out = capsys.readouterr().out
    assert "stopped at check 3 (one forward pass)" in out and "NONFINITE_INPUT" in out
    assert cli.main(["preflight", "--case", "nan_rows", "--fixed", "--steps", "30"]) == 0
