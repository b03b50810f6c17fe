"""Karpathy's dependency test: output i may depend on input i only."""
import pytest
import torch
from torch import nn

from lesson.checks.batch_independence import check_batch_independence


class TimeMajorHead(nn.Module):
    """Takes (time, batch, features) and flattens time into features for a linear head."""

    def __init__(self, steps=5, features=3, wrong=True):
        super().__init__()
        self.head = nn.Linear(steps * features, 2)
        self.wrong = wrong

    def forward(self, x):
        t, b, f = x.shape
        if self.wrong:
            flat = x.view(b, t * f)  # the bug: reads across the batch
        else:
            flat = x.permute(1, 0, 2).reshape(b, t * f)
        return self.head(flat)


class SoftmaxOverBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return torch.softmax(self.lin(x), dim=0)


class Recurrent(nn.Module):
    """Fed (batch, time, features); batch_first=False reads batch as time."""

    def __init__(self, batch_first):
        super().__init__()
        self.rnn = nn.LSTM(4, 8, batch_first=batch_first)
        self.head = nn.Linear(8, 2)
        self.batch_first = batch_first

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def _pairs(findings):
    assert [f.code for f in findings] == ["BATCH_MIXING"]
    return {tuple(p) for p in findings[0].evidence["pairs"]}


def test_view_across_the_batch_is_found():
    torch.manual_seed(0)
    x = torch.randn(5, 6, 3)  # (time, batch, features)
    findings = check_batch_independence(TimeMajorHead(), x, batch_dim=1, output_batch_dim=0)
    pairs = _pairs(findings)
    assert (0, 1) in pairs and all(i != j for i, j in pairs)
    assert check_batch_independence(TimeMajorHead(wrong=False), x, batch_dim=1,
                                    output_batch_dim=0) == []


def test_softmax_over_the_batch_is_found():
    torch.manual_seed(0)
    pairs = _pairs(check_batch_independence(SoftmaxOverBatch(), torch.randn(6, 4)))
    assert len(pairs) == 6 * 5  # every output depends on every other input


def test_rnn_with_batch_and_time_swapped_is_found():
    torch.manual_seed(0)
    x = torch.randn(6, 7, 4)  # (batch, time, features)
    pairs = _pairs(check_batch_independence(Recurrent(batch_first=False), x))
    # "time" is really the batch: sample i sees samples before it, never after
    assert (3, 0) in pairs and all(j < i for i, j in pairs)
    assert check_batch_independence(Recurrent(batch_first=True), x) == []


@pytest.mark.parametrize("make, shape", [
    (lambda: nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5),
                           nn.Linear(16, 2)), (8, 4)),
    (lambda: nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                           nn.Linear(4 * 36, 3)), (5, 1, 8, 8)),
    (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True),
                                   2, enable_nested_tensor=False), (5, 7, 16)),
], ids=["mlp-batchnorm-dropout", "cnn", "transformer"])
def test_correct_models_pass_and_keep_their_mode(make, shape):
    torch.manual_seed(0)
    model = make()
    model.train()
    assert check_batch_independence(model, torch.randn(*shape)) == []
    assert model.training and all(m.training for m in model.modules())
    assert all(p.grad is None for p in model.parameters())


def test_tuple_outputs_are_handled():
    torch.manual_seed(0)
    rnn = nn.GRU(4, 5, batch_first=True)  # returns (output, h_n)
    assert check_batch_independence(rnn, torch.randn(4, 3, 4)) == []


def test_bad_inputs_are_clear_errors():
    with pytest.raises(TypeError, match="nn.Module"):
        check_batch_independence(lambda t: t, torch.randn(4, 2))
    with pytest.raises(ValueError, match="at least 2"):
        check_batch_independence(nn.Linear(2, 2), torch.randn(1, 2))
    with pytest.raises(TypeError, match="floating point"):
        check_batch_independence(nn.Embedding(5, 2), torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="batch_dim"):
        check_batch_independence(nn.Linear(2, 2), torch.randn(4, 2), batch_dim=3)
    with pytest.raises(ValueError, match="output_batch_dim"):
        check_batch_independence(TimeMajorHead(), torch.randn(5, 6, 3), batch_dim=1)


# -- edges: what each condition of the test is there for -----------------------------------------

class Fn(nn.Module):
    """A model that applies `fn` (and holds one weight, so it is a model)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.w = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return self.fn(x, self.w)


def _mix(share: float, scale: float = 1.0) -> Fn:
    """Output i = scale * (x_i + share * x_{i+1}): a leak of `share` of the sample's own."""
    return Fn(lambda x, w: scale * w * (x + share * x.roll(-1, 0)))


@pytest.mark.parametrize("output", [
    lambda t: ({"aux": "text", "logits": t},),          # a dict inside a tuple
    lambda t: (None, [t]),                              # a non-tensor first, a list next
])
def test_the_first_tensor_is_found_in_nested_outputs(output):
    found = check_batch_independence(Fn(lambda x, w: output(w * x.softmax(0))), torch.randn(4, 3))
    assert _pairs(found)


def test_batch_dim_is_keyword_only():
    with pytest.raises(TypeError):
        check_batch_independence(_mix(0.0), torch.randn(4, 3), 0)


def test_every_valid_batch_dim_and_only_those():
    x = torch.randn(4, 3)
    assert check_batch_independence(_mix(0.0), x, batch_dim=-2) == []   # -x.dim() is valid
    assert check_batch_independence(_mix(0.0), torch.randn(5)) == []    # a batch of numbers
    with pytest.raises(ValueError, match="not a dimension"):
        check_batch_independence(_mix(0.0), x, batch_dim=2)


def test_two_samples_are_enough():
    assert _pairs(check_batch_independence(_mix(0.5), torch.randn(2, 3))) == {(0, 1), (1, 0)}


def test_samples_checked_are_at_most_max_samples():
    (f,) = check_batch_independence(_mix(0.5), torch.randn(6, 3), max_samples=4)
    assert f.evidence["samples_checked"] == 4 and {i for i, _ in f.evidence["pairs"]} == {0, 1, 2, 3}


def test_the_leak_is_measured_relative_to_the_samples_own_gradient():
    (f,) = check_batch_independence(_mix(0.5), torch.randn(4, 3))
    assert f.evidence["max_relative_leak"] == pytest.approx(0.5)
    # gradients of 1e-8: relative to the sample's own, still half of it
    (f,) = check_batch_independence(_mix(0.5, scale=1e-8), torch.randn(4, 3))
    assert f.evidence["max_relative_leak"] == pytest.approx(0.5)
    assert check_batch_independence(_mix(1e-7), torch.randn(4, 3)) == []    # round-off


def test_an_output_that_ignores_the_input_mixes_nothing():
    assert check_batch_independence(Fn(lambda x, w: w.expand(x.shape[0], 2)),
                                    torch.randn(4, 3)) == []


def test_the_message_shows_six_pairs_then_says_there_are_more():
    (f,) = check_batch_independence(Fn(lambda x, w: w * x.softmax(0)), torch.randn(3, 2))
    assert len(f.evidence["pairs"]) == 6 and "...)" not in f.message
    (f,) = check_batch_independence(Fn(lambda x, w: w * x.softmax(0)), torch.randn(4, 2))
    assert len(f.evidence["pairs"]) == 12
    assert f.message.count("<-") == 1 + 6 and "1<-3 ...)" in f.message   # "output<-input: "


def test_seven_pairs_are_more_than_the_six_shown():
    mixing = torch.eye(4)
    for i, j in [(0, 1), (0, 2), (0, 3), (1, 0), (1, 2), (1, 3), (2, 0)]:
        mixing[i, j] = 0.5
    (f,) = check_batch_independence(Fn(lambda x, w: w * (mixing @ x)), torch.randn(4, 2))
    assert len(f.evidence["pairs"]) == 7 and f.message.count("<-") == 1 + 6
    assert "1<-3 ...)" in f.message
