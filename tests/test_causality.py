"""check_causality: does any output position depend on inputs after it? (issue 29)"""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from lesson import check_causality
from lesson.debugger import dependence


class Attention(nn.Module):
    """One attention layer over token ids. `future`: how many later positions each query may
    see (0: causal); `start`: the first query allowed to see them; `bias`: the value of a
    masked score (-inf, or a weak finite mask)."""

    def __init__(self, vocab: int = 11, d: int = 16, future: int = 0, start: int = 0,
                 bias: float = -math.inf, dropout: float = 0.0) -> None:
        super().__init__()
        self.embed, self.qkv = nn.Embedding(vocab, d), nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, vocab)
        self.drop = nn.Dropout(dropout)
        self.future, self.start, self.bias = future, start, bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        q, k, v = self.qkv(h).chunk(3, -1)
        t = x.shape[1]
        i = torch.arange(t)
        allowed = i[None, :] <= i[:, None] + torch.where(i[:, None] >= self.start,
                                                         self.future, 0)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~allowed, self.bias)
        return self.out(self.drop(torch.softmax(scores, -1)) @ v + h)


def tokens(b: int = 3, t: int = 10, vocab: int = 11, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


def test_a_causal_model_passes_and_a_missing_mask_is_named():
    torch.manual_seed(0)
    assert check_causality(Attention(), tokens()) == []
    [f] = check_causality(Attention(future=99), tokens())
    assert f.code == "CAUSAL_LEAK" and f.evidence["position"] == 0
    assert f.evidence["reads_positions"] == list(range(1, 9))
    assert f.layer == "Attention"          # the attention is the root's own code


def test_the_first_leaking_position_is_found_where_it_starts():
    torch.manual_seed(0)
    [f] = check_causality(Attention(future=1, start=6), tokens(t=12))
    assert f.evidence["position"] == 6 and f.evidence["reads_positions"] == [7]
    # on a sequence longer than one batch of variants: found by refinement
    [f] = check_causality(Attention(future=1, start=40), tokens(t=70), max_variants=8)
    assert f.evidence["position"] == 40 and f.evidence["reads_positions"] == [41]


def test_a_weak_mask_leaks_and_a_large_finite_one_does_not():
    torch.manual_seed(0)
    assert check_causality(Attention(bias=-10.0), tokens())        # e^-10: still a leak
    assert check_causality(Attention(bias=-1e9), tokens()) == []   # exp underflows to 0


def test_the_change_threshold_separates_a_leak_from_round_off():
    before = torch.tensor([1.0, 0, 0, 0]).reshape(1, 4, 1)
    for delta, moved in ((1.1e-5, True), (0.9e-5, False)):     # relative to the largest |out|
        after = before + torch.tensor([0, 0, 0, delta]).reshape(1, 4, 1)
        table = dependence.movement(after, before, (0, 1))
        assert bool(table[0, 3] > dependence.RELATIVE_CHANGE) is moved
        assert table[0, :3].max() == 0


class Recurrent(nn.Module):
    """Float features through a GRU; `bidirectional`: reads the future."""

    def __init__(self, bidirectional: bool = False, batch_first: bool = True) -> None:
        super().__init__()
        self.rnn = nn.GRU(4, 8, batch_first=batch_first, bidirectional=bidirectional)
        self.head = nn.Linear(16 if bidirectional else 8, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, h = self.rnn(x)
        return self.head(out), h                 # a tuple: the prediction comes first


def test_float_features_time_first_and_tuple_outputs():
    torch.manual_seed(0)
    x = torch.randn(5, 9, 4)
    assert check_causality(Recurrent(), x) == []
    [f] = check_causality(Recurrent(bidirectional=True), x)
    assert f.layer == "rnn" and f.evidence["position"] == 0
    xt = x.transpose(0, 1).contiguous()
    assert check_causality(Recurrent(batch_first=False), xt, batch_first=False) == []
    [f] = check_causality(Recurrent(bidirectional=True, batch_first=False), xt,
                          batch_first=False)
    assert f.evidence["batch_first"] is False


class Seq2Seq(nn.Module):
    """model(src, tgt, tgt_key_padding_mask=...) -> {"logits": ...}: nn.Transformer."""

    def __init__(self, causal: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 16)
        self.t = nn.Transformer(16, 2, 1, 1, 32, dropout=0.3, batch_first=True)
        self.head = nn.Linear(16, 11)
        self.causal = causal

    def forward(self, src, tgt, tgt_key_padding_mask=None):
        n = tgt.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n) if self.causal else None
        h = self.t(self.embed(src), self.embed(tgt), tgt_mask=mask,
                   tgt_key_padding_mask=tgt_key_padding_mask, tgt_is_causal=self.causal)
        return {"logits": self.head(h)}


def test_extra_arguments_dict_outputs_and_dropout():
    torch.manual_seed(0)
    src, tgt = tokens(3, 7, seed=1), tokens(3, 6, seed=2)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[1, 4:] = True
    kwargs = {"tgt_key_padding_mask": pad}
    model = Seq2Seq()
    model.train()                                  # dropout on: the check runs in eval mode
    assert check_causality(model, tgt, args=(src,), input_at=1, kwargs=kwargs) == []
    assert model.training                          # and gives the mode back
    [f] = check_causality(Seq2Seq(causal=False), tgt, args=(src,), input_at=1, kwargs=kwargs)
    assert f.layer.startswith("t.decoder.layers.0.self_attn")


class HFOutput:
    def __init__(self, logits):
        self.logits = logits


class KeywordModel(nn.Module):
    """model(input_ids=..., attention_mask=...) -> an object with .logits."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Attention(future=1)

    def forward(self, input_ids, attention_mask):
        return HFOutput(self.inner(input_ids) * attention_mask[..., None])


def test_keyword_inputs_and_objects_with_logits():
    x = tokens(4, 8)
    [f] = check_causality(KeywordModel(), x, kwargs={"attention_mask": torch.ones(4, 8)},
                          input_at="input_ids")
    assert f.layer == "inner" and f.evidence["position"] == 0


def test_the_model_is_restored_bitwise_also_when_it_raises():
    torch.manual_seed(0)
    model = Attention(future=99, dropout=0.5)
    model.train()
    model.out.weight.grad = torch.ones_like(model.out.weight)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    check_causality(model, tokens())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.training and torch.equal(model.out.weight.grad,
                                          torch.ones_like(model.out.weight))

    class Fails(Attention):
        def forward(self, x):
            self.out.weight.data.add_(1.0)             # a forward that changes the model...
            raise RuntimeError("boom")                 # ...and then raises
    failing = Fails()
    kept = failing.out.weight.detach().clone()
    with pytest.raises(RuntimeError, match="boom"):
        check_causality(failing, tokens())
    assert torch.equal(failing.out.weight, kept)


def test_the_callers_random_state_is_kept():
    model, x = Attention(future=99, dropout=0.2), tokens()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_causality(model, x)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("bad, error, match", [
    ({"inputs": [[1, 2]]}, TypeError, "torch.Tensor"),
    ({"inputs": torch.ones(3, 4, dtype=torch.bool)}, TypeError, "token ids"),
    ({"inputs": torch.tensor([1, 2, 3])}, ValueError, "batch and a time"),
    ({"inputs": torch.ones(3, 1, dtype=torch.long)}, ValueError, "no future"),
    ({"inputs": -torch.ones(3, 4, dtype=torch.long)}, ValueError, ">= 0"),
    ({"sample": 3}, ValueError, "sample"),
    ({"args": "src"}, TypeError, "args"),
    ({"kwargs": [1]}, TypeError, "kwargs"),
    ({"input_at": 2}, ValueError, "input_at"),
    ({"batch_first": 1}, TypeError, "batch_first"),
    ({"max_variants": 0}, ValueError, "max_variants"),
    ({"model": "net"}, TypeError, "nn.Module"),
    # at the edges: a row counted from the end, a bool or fractional count, a place before
    # the first, no row at all, the keyword the sequence goes under already taken
    ({"sample": -1}, ValueError, "sample"),
    ({"max_variants": True}, ValueError, "max_variants"),
    ({"max_variants": 2.5}, ValueError, "max_variants"),
    ({"input_at": -1}, ValueError, "input_at"),
    ({"inputs": torch.ones(0, 4, dtype=torch.long)}, ValueError, "batch is empty"),
    ({"input_at": "x", "kwargs": {"x": 1}}, ValueError, "already holds"),
])
def test_bad_input_gets_a_clear_error(bad, error, match):
    call = {"model": Attention(), "inputs": tokens()} | bad
    model, inputs = call.pop("model"), call.pop("inputs")
    with pytest.raises(error, match=match):
        check_causality(model, inputs, **call)


def test_an_output_without_the_batch_is_refused_clearly():
    class Pooled(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(11, 4)

        def forward(self, x):
            return self.embed(x).sum()              # one number for the whole batch
    with pytest.raises(ValueError, match="no dimension of the batch"):
        check_causality(Pooled(), tokens())


def test_single_token_vocabulary_uses_the_embedding_table():
    x = torch.full((2, 6), 3)
    assert check_causality(Attention(), x) == []
    assert check_causality(Attention(future=99), x)
    with pytest.raises(ValueError, match="same id"):
        check_causality(nn.Sequential(nn.Identity()), x.float().long())


def test_sdpa_attention_through_a_module_output_with_extra_positional_args():
    class Block(nn.Module):
        def __init__(self, causal):
            super().__init__()
            self.embed, self.causal = nn.Embedding(11, 8), causal

        def forward(self, x, scale):
            h = self.embed(x)[:, None]
            return F.scaled_dot_product_attention(h, h, h, is_causal=self.causal)[:, 0] * scale
    x = tokens(2, 5)
    assert check_causality(Block(True), x, args=(2.0,)) == []
    assert check_causality(Block(False), x, args=(2.0,))


def test_flattened_logits_are_laid_out_again():
    class Flat(Attention):
        def forward(self, x):
            return super().forward(x).reshape(-1, 11)       # (B x T, vocab), for the loss
    torch.manual_seed(0)
    assert check_causality(Flat(), tokens()) == []
    [f] = check_causality(Flat(future=99), tokens())
    assert f.evidence["position"] == 0
    xt = tokens().t().contiguous()

    class FlatTimeFirst(Attention):
        def forward(self, x):
            return super().forward(x.t()).transpose(0, 1).reshape(-1, 11)
    assert check_causality(FlatTimeFirst(), xt, batch_first=False) == []
    assert check_causality(FlatTimeFirst(future=99), xt, batch_first=False)


# -- the arguments at their edges ---------------------------------------------------------------

def test_the_smallest_valid_calls():
    torch.manual_seed(0)
    model = Attention(future=99)
    assert check_causality(model, tokens(b=1, t=2), max_variants=1)       # one row, two steps
    assert check_causality(model, tokens(t=3), sample=2)                  # the last row
    assert check_causality(Attention(), tokens(b=1, t=2)) == []


def test_the_message_names_what_is_read_and_where_it_appears():
    torch.manual_seed(0)
    [f] = check_causality(Attention(future=1, start=6), tokens(t=12))
    assert "input position(s) 7 change" in f.message
    assert f.message.endswith("; it first appears in the output of Attention")


def test_at_most_16_leaking_positions_are_listed():
    torch.manual_seed(0)
    [f] = check_causality(Attention(future=99), tokens(t=40))
    assert len(f.evidence["leaking_positions"]) == 16
