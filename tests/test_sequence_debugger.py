"""The debugger on sequence models (issue 29): healthy models of four styles give no finding
on seeds 0-4 and train; each broken variant shows its symptom and is named.

The models and data are in tests/sequence_zoo.py. Each broken test asserts the symptom first
(a loss below the data's entropy floor, accuracy at chance, ...), then the finding and its
evidence.
"""
from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

import sequence_zoo as zoo

SEEDS = range(5)


def _clean(run: dict) -> None:
    assert run["findings"] == [], [(f.code, f.message) for f in run["findings"]]
    assert run["debugger"].errors == []


def _finding(run: dict, code: str):
    found = [f for f in run["findings"] if f.code == code]
    assert found, (code, [(f.code, f.message) for f in run["findings"]])
    return found[0]


def _tail(losses: list[float]) -> float:
    return sum(losses[-10:]) / 10


# -- healthy: four styles, seeds 0-4, no finding, and each one trains ----------------------------
def _healthy_lm(seed: int) -> None:
    run = zoo.train_lm(seed)
    _clean(run)
    assert _tail(run["losses"]) < run["floor"] + 0.5 < run["losses"][0]


def _healthy_encoder(seed: int) -> None:
    run = zoo.train_encoder(seed, pad=0 if seed % 2 else 9)
    _clean(run)
    assert run["accuracy"] >= 0.9


def _healthy_tagger(seed: int) -> None:
    run = zoo.train_tagger(seed, pad=seed)          # pad ids 0..4, inside the vocabulary
    _clean(run)
    assert run["accuracy"] >= 0.9


def _healthy_seq2seq(seed: int) -> None:
    run = zoo.train_seq2seq(seed)
    _clean(run)
    assert run["accuracy"] >= 0.6 and _tail(run["losses"]) < 0.5 * run["losses"][0]


HEALTHY = {"causal_lm": _healthy_lm, "encoder_classifier": _healthy_encoder,
           "gru_tagger": _healthy_tagger, "seq2seq": _healthy_seq2seq}


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_sequence_models_train_without_findings(name):
    HEALTHY[name](0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [s for s in SEEDS if s])
@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_sequence_models_on_seeds_1_to_4(name, seed):
    HEALTHY[name](seed)


#: healthy models that handle their padding themselves: a summary token prepended and the
#: mask built inside (three kinds of attention), packed recurrent batches read two right ways
HEALTHY_INSIDE = {
    "summary_encoder": lambda seed: zoo.train_summary(seed, attention="encoder", pad=seed),
    "summary_mha": lambda seed: zoo.train_summary(seed, attention="mha", pad=9 - seed),
    "summary_sdpa": lambda seed: zoo.train_summary(seed, attention="sdpa", pad=seed + 2),
    "packed_gru_final": lambda seed: zoo.train_packed(seed, read="final", pad=seed),
    "packed_lstm_own_time_first": lambda seed: zoo.train_packed(
        seed, read="own", cell="lstm", batch_first=False, pad=11 - seed),
}


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", HEALTHY_INSIDE)
def test_healthy_models_that_handle_their_own_padding(name, seed):
    run = HEALTHY_INSIDE[name](seed)
    _clean(run)
    assert run["accuracy"] >= 0.85               # (the majority class is about 0.65)
    if "padding_moves" in run:                   # the padding is really ignored
        assert run["padding_moves"] < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("style", ["hf_right", "hf_left", "hf_pad_last", "decoder_time_first",
                                   "lstm", "padded_lm_pad_last", "gru_classifier",
                                   "accumulation_weighted", "generation_unpadded",
                                   "bidirectional_tagger"])
def test_other_healthy_styles_give_no_finding(style):
    runs = {
        "hf_right": lambda: zoo.train_hf(1),
        "hf_left": lambda: zoo.train_hf(1, left=True),
        "hf_pad_last": lambda: zoo.train_hf(2, pad=10),
        "decoder_time_first": lambda: zoo.train_plain_lm(
            zoo.TorchDecoderLM(12, batch_first=False), 1, batch_first=False),
        "lstm": lambda: zoo.train_plain_lm(zoo.LSTMLM(12), 1),
        "padded_lm_pad_last": lambda: zoo.train_padded_lm(1, pad=10),
        "gru_classifier": lambda: zoo.train_gru_classifier(1, pad=3),
        "accumulation_weighted": lambda: zoo.train_padded_lm(1, micro=2),
        "generation_unpadded": lambda: zoo.train_padded_lm(1, generate="unpadded"),
        "bidirectional_tagger": lambda: zoo.train_tagger(1, bidirectional=True),
    }
    run = runs[style]()
    _clean(run)
    assert _tail(run["losses"]) < 0.8 * run["losses"][0]


# -- broken: each variant, its symptom, its finding ---------------------------------------------
@pytest.mark.parametrize("variant", ["sdpa", "handwritten", "hf", "torch_none", "torch_offset",
                                     "bidirectional_lstm"])
def test_a_causal_leak_is_found_with_its_position_and_module(variant):
    runs = {
        "sdpa": lambda: zoo.train_lm(0, causal=False, steps=150),
        "handwritten": lambda: zoo.train_lm(0, handwritten=True, causal=False, steps=150),
        "hf": lambda: zoo.train_hf(0, causal=False, steps=150),
        "torch_none": lambda: zoo.train_plain_lm(zoo.TorchDecoderLM(12, mask="none"), 0,
                                                 steps=150),
        "torch_offset": lambda: zoo.train_plain_lm(zoo.TorchDecoderLM(12, mask="offset"), 0,
                                                   steps=150),
        "bidirectional_lstm": lambda: zoo.train_plain_lm(zoo.LSTMLM(12, bidirectional=True), 0,
                                                         steps=150),
    }
    run = runs[variant]()
    # the symptom: the training loss falls below what the data allows
    assert _tail(run["losses"]) < run["floor"] - 0.05
    leak = _finding(run, "CAUSAL_LEAK")
    assert leak.evidence["position"] == 0
    assert leak.evidence["reads_positions"][0] == 1
    if variant == "torch_offset":           # the mask is off by one: position t reads t + 1 only
        assert leak.evidence["reads_positions"] == [1, 2]      # through the two layers
    expected = {"sdpa": "blocks.0", "handwritten": "blocks.0", "hf": "HFStyleLM",
                "torch_none": "body.layers.0.self_attn", "torch_offset": "body.layers.0.self_attn",
                "bidirectional_lstm": "rnn"}[variant]
    assert leak.layer == expected


def test_targets_equal_to_the_inputs_are_named():
    run = zoo.train_lm(0, shift=False, steps=150)
    assert _tail(run["losses"]) < 0.1 < run["floor"]          # it copies: far below the floor
    f = _finding(run, "TARGETS_NOT_SHIFTED")
    assert f.evidence["share_equal"] == 1.0
    assert "CAUSAL_LEAK" not in run["codes"]      # not a next-token run: no causality verdict


@pytest.mark.parametrize("pad", [0, 10])
def test_padding_counted_in_the_loss_is_named(pad):
    healthy = zoo.train_padded_lm(0, pad=pad, steps=120)
    broken = zoo.train_padded_lm(0, pad=pad, ignore=False, steps=120)
    # the symptom: the logged loss looks better than the healthy twin's, on the same data
    assert _tail(broken["losses"]) < _tail(healthy["losses"]) - 0.1
    f = _finding(broken, "PADDING_IN_LOSS")
    assert f.evidence["pad_id"] == pad and 0.2 < f.evidence["padded_share"] < 0.6
    assert str(pad) in f.advice
    _clean(healthy)


def test_a_tagger_whose_padding_is_tagged_and_counted_is_named():
    run = zoo.train_tagger(0, pad=0, ignore_padding=False)
    assert _finding(run, "PADDING_IN_LOSS").evidence["padded_share"] > 0.2


def test_an_inverted_key_padding_mask_is_named():
    run = zoo.train_encoder(0, mask="inverted")
    f = _finding(run, "PADDING_MASK_INVERTED")
    assert f.layer == "encoder.layers.0.self_attn"
    assert f.evidence["real_keys_masked"] == 1.0 and f.evidence["mass_on_padding"] == 1.0


def test_an_inverted_attention_mask_explains_the_leak_it_opens():
    run = zoo.train_hf(0, invert_mask=True)
    codes = [f.code for f in run["findings"]]
    assert codes[0] == "PADDING_MASK_INVERTED"       # the cause first
    leak = _finding(run, "CAUSAL_LEAK")
    assert leak.explained_by == "PADDING_MASK_INVERTED"


def test_attention_on_padding_without_a_key_padding_mask():
    run = zoo.train_encoder(0, mask="none")
    f = _finding(run, "ATTENTION_ON_PADDING")
    assert 0.05 < f.evidence["mass_on_padding"] < 0.6 and f.evidence["padded_keys_masked"] == 0
    # the symptom: a sample's prediction changes with the padding of its batch
    model = run["debugger"].model.eval()
    x, _, kpm = zoo.count_task(5, 4, 0)
    longer = torch.cat([x, torch.zeros(4, 6, dtype=torch.long)], 1)
    with torch.no_grad():
        a = model(x, key_padding_mask=kpm)
        b = model(longer, key_padding_mask=longer == 0)
    assert (a - b).abs().max() > 1e-3


def test_saturated_attention_is_named_and_its_scaled_twin_is_not():
    broken = zoo.train_lm(0, scaled=False, d=256, heads=1, steps=30)
    f = _finding(broken, "ATTENTION_SATURATED")
    assert f.evidence["normalized_entropy"] < 0.3 and f.evidence["mean_max_weight"] > 0.6
    fixed = zoo.train_lm(0, handwritten=True, d=256, heads=1, steps=30)
    assert "ATTENTION_SATURATED" not in fixed["codes"]
    # the symptom: the same model learns more slowly without the scale
    assert _tail(broken["losses"]) > _tail(fixed["losses"])


def test_unscaled_attention_of_head_size_64_is_named_though_not_one_hot():
    """The common size, under PyTorch's Linear init: rows start at about half a uniform row's
    entropy (scores spread by ~2.5), far from one-hot, and learning already lags."""
    broken = zoo.train_lm(0, scaled=False, d=128, heads=2, steps=150)
    fixed = zoo.train_lm(0, handwritten=True, d=128, heads=2, steps=150)

    def settling(run: dict) -> float:        # the loss after the first fall, to step 150
        return sum(run["losses"][30:]) / len(run["losses"][30:])
    assert settling(broken) > settling(fixed) + 0.02
    f = _finding(broken, "ATTENTION_SATURATED")
    assert 0.3 < f.evidence["normalized_entropy"] < 0.6 and f.evidence["mean_max_weight"] < 0.8
    _clean(fixed)


def test_a_padded_batch_read_at_its_last_position_is_named():
    broken, fixed = zoo.train_gru_classifier(0, read="last"), zoo.train_gru_classifier(0)
    assert broken["accuracy"] < 0.75 < 0.95 <= fixed["accuracy"]
    f = _finding(broken, "PADDED_POSITION_READ")
    assert f.evidence["position"] == -1 and f.evidence["padded_share"] > 0.5
    _clean(fixed)


@pytest.mark.parametrize("model", ["gru", "transformer"])
def test_batch_and_time_swapped_is_batch_mixing(model):
    if model == "gru":
        run = zoo.train_gru_classifier(0, batch_first=False)
        assert run["accuracy"] < 0.45                     # three classes: at chance
        assert _finding(run, "BATCH_MIXING").layer == "rnn"
    else:
        run = zoo.train_encoder(0, batch_first=False, mask="none")
        f = _finding(run, "BATCH_MIXING")
        assert f.layer == "encoder.layers.0.self_attn" and f.evidence["batch_dim"] == 0


def test_a_time_first_batch_fed_to_a_batch_first_model_is_batch_mixing_not_a_leak():
    run = zoo.train_plain_lm(zoo.TorchDecoderLM(12, batch_first=True), 0, batch_first=False)
    assert run["codes"] == {"BATCH_MIXING"}


def test_accumulation_that_averages_means_over_different_token_counts():
    run = zoo.train_padded_lm(0, micro=2, weighted=False)
    f = _finding(run, "ACCUMULATION_UNWEIGHTED_MEAN")
    tokens = f.evidence["tokens_per_pass"]
    assert len(tokens) == 2 and tokens[0] != tokens[1]
    assert f.evidence["scale_per_pass"][0] == f.evidence["scale_per_pass"][1]
    # the symptom: the mean of the passes' means is not the mean over the step's tokens
    losses = torch.tensor([1.0, 2.0])
    counts = torch.tensor(tokens, dtype=torch.float)
    assert abs(losses.mean() - (losses * counts).sum() / counts.sum()) > 1e-3
    assert "ACCUMULATION_UNWEIGHTED_MEAN" not in zoo.train_padded_lm(0, micro=2)["codes"]


def test_a_post_ln_transformer_without_warmup():
    broken = zoo.train_lm(0, post_ln=True, warmup=False, lr=3e-2)
    assert max(broken["losses"][:60]) > 2 * broken["losses"][0]          # it blows up
    f = _finding(broken, "WARMUP_MISSING")
    assert f.evidence["lr_at_start"] == f.evidence["peak_lr"] == 3e-2
    warmed = zoo.train_lm(0, post_ln=True, warmup=True, lr=3e-2)       # same peak, warmed up
    assert "WARMUP_MISSING" not in warmed["codes"]


def test_weights_meant_to_be_tied_but_copied():
    broken = zoo.train_lm(0, tie="copied")
    f = _finding(broken, "UNTIED_WEIGHTS")
    assert set(f.evidence["params"]) == {"embed.weight", "head.weight"}
    model = broken["model"]
    assert model.head.weight is not model.embed.weight                # two tensors...
    assert not torch.equal(model.head.weight, model.embed.weight)     # ...trained apart
    assert "UNTIED_WEIGHTS" not in zoo.train_lm(0, tie="shared")["codes"]
    assert "UNTIED_WEIGHTS" not in zoo.train_lm(0, tie="none")["codes"]


def test_generation_fed_padding_training_never_showed():
    run = zoo.train_padded_lm(0, generate="left_padded")
    f = _finding(run, "GENERATION_ON_PADDING")
    assert f.evidence["padded_rows"] == 3 and f.evidence["pad_id"] == 0
    assert "GENERATION_ON_PADDING" not in zoo.train_padded_lm(0, generate="unpadded")["codes"]


def test_probes_cost_the_run_nothing_after_the_first_step():
    run = zoo.train_lm(0, steps=12)
    seq = run["debugger"].sequences
    assert seq.probes_done and seq.probe_findings == []
    # the probes ran the model in eval mode and put it back as it was
    assert all(m.training for m in run["model"].modules())


class _Flat(torch.nn.Module):
    """A model that returns its logits flattened, (batch x time, vocab), as many LMs do."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.inner(x)
        return out.reshape(-1, out.shape[-1])


def test_flattened_logits_still_get_the_probes():
    leaky = zoo.train_plain_lm(_Flat(zoo.TorchDecoderLM(12, mask="none")), 0, steps=20)
    assert _finding(leaky, "CAUSAL_LEAK").layer == "inner.body.layers.0.self_attn"
    _clean(zoo.train_plain_lm(_Flat(zoo.TorchDecoderLM(12)), 0, steps=20))


# -- padding the model handles itself: what the attention and the reads see ------------------------
@pytest.mark.parametrize("attention, pad", [("encoder", 0), ("mha", 7), ("sdpa", 9)])
def test_an_inverted_mask_built_inside_the_model_is_named(attention, pad):
    """The model prepends a summary token and builds the mask itself (the batch it is given
    is one position shorter than the attention's keys): the padding is found in the ids its
    embedding looks up."""
    broken = zoo.train_summary(0, attention=attention, pad=pad, mask="inverted")
    healthy = zoo.train_summary(0, attention=attention, pad=pad)
    # the symptom: the broken model stays at the majority class, its twin learns the task
    assert broken["accuracy"] < 0.7 and healthy["accuracy"] >= 0.95
    f = _finding(broken, "PADDING_MASK_INVERTED")
    assert f.evidence["real_keys_masked"] == 1.0
    assert broken["codes"] <= {"PADDING_MASK_INVERTED", "ATTENTION_ON_PADDING", "NAN_OR_INF"}
    assert broken["findings"][0].code == "PADDING_MASK_INVERTED"
    _clean(healthy)


@pytest.mark.parametrize("attention, pad", [("encoder", 3), ("mha", 0), ("sdpa", 9)])
def test_no_mask_where_the_model_pads_is_attention_on_padding(attention, pad):
    broken = zoo.train_summary(0, attention=attention, pad=pad, mask="none")
    # the symptom: the same sequences with 8 more pad tokens get other probabilities
    assert broken["padding_moves"] > 1e-2
    f = _finding(broken, "ATTENTION_ON_PADDING")
    assert 0.05 < f.evidence["mass_on_padding"] < 0.6 and f.evidence["padded_keys_masked"] == 0
    assert broken["codes"] == {"ATTENTION_ON_PADDING"}


def test_the_mask_given_to_attention_names_the_pad_id():
    """Rows all padded to one length (no run of different lengths to find) and text that uses
    every id: the key padding mask nn.MultiheadAttention is given tells the pad id."""
    from lesson.debugger.sequences import SequenceWatch

    model = zoo.SummaryClassifier(10, 2, pad=4, attention="mha")
    watch = SequenceWatch(model, lambda *a: None)
    x = torch.randint(0, 10, (8, 12), generator=torch.Generator().manual_seed(0))
    x[x == 4] = 5
    x[:, 9:] = 4                                 # every row: 9 tokens, then 3 pads
    watch.on_train_forward((x,), {}, 0, True, [])
    assert watch.pad_id is None                  # one length for all: no filler found
    tokens = torch.cat([torch.full((8, 1), 10), x], 1)
    watch.on_call(F.embedding, (tokens, model.embed.weight), {}, None, "embed", 0, True)
    q = torch.randn(13, 8, 32)
    mask = torch.zeros(8, 13).masked_fill(tokens == 4, float("-inf"))
    attn = model.attn[0]
    args = (q, q, q, 32, 2, attn.in_proj_weight, attn.in_proj_bias, None, None, False, 0.0,
            attn.out_proj.weight, attn.out_proj.bias)
    watch.on_call(F.multi_head_attention_forward, args, {"key_padding_mask": mask,
                                                         "need_weights": False},
                  None, "attn.0", 0, True)
    assert watch.pad_id == 4 and "given to the attention" in watch.pad_source
    assert watch.findings() == []                # the mask hides exactly the padding


@pytest.mark.parametrize("cell, batch_first, pad", [("gru", True, 0), ("lstm", False, 5)])
def test_a_packed_batch_read_at_its_last_unpacked_step(cell, batch_first, pad):
    """pad_packed_sequence returns outputs as long as the batch's longest row, shorter than the
    padded batch: out[:, -1] (out[-1] time-first) is padding, zeros, for every shorter row."""
    broken = zoo.train_packed(0, read="last", cell=cell, batch_first=batch_first, pad=pad)
    healthy = zoo.train_packed(0, read="own", cell=cell, batch_first=batch_first, pad=pad)
    assert broken["accuracy"] < 0.6 and healthy["accuracy"] >= 0.95       # the symptom
    f = _finding(broken, "PADDED_POSITION_READ")
    assert f.evidence["outputs_cut_to_longest_row"] and f.evidence["padded_share"] > 0.5
    assert f.evidence["position"] == -1
    # a row's answer depends on how long its batch-mates are, not on what they say: the batch
    # probe keeps each row's padding, so this is no BATCH_MIXING
    assert broken["codes"] == {"PADDED_POSITION_READ"}
    _clean(healthy)


def test_a_post_ln_encoder_stalled_by_its_first_steps():
    """nn.TransformerEncoder's default post-LN layers at 4e-2 from step 0: the first updates
    leave the model at the marginal entropy of the tokens (it ignores its input); the same
    peak reached over a warm-up trains."""
    def run(warmup: int, seed: int = 2) -> dict:
        torch.manual_seed(seed)
        return zoo.train_plain_lm(zoo.TorchDecoderLM(12, norm_first=False, layers=4), seed,
                                  steps=200, lr=4e-2, batch=32, warmup=warmup)

    broken, warmed = run(0), run(100)
    marginal = broken["debugger"].sequences.marginal_entropy()
    stalled = sum(broken["losses"][150:]) / 50
    assert stalled > 0.97 * marginal > broken["floor"] + 0.5               # the symptom
    assert sum(warmed["losses"][-20:]) / 20 < warmed["floor"] + 0.1
    f = broken["findings"][0]
    assert f.code == "WARMUP_MISSING" and f.evidence["first_update_ratio"] > 0.1
    assert f.evidence["marginal_entropy"] == pytest.approx(marginal, rel=0.01)
    assert all(g.explained_by for g in broken["findings"][1:])              # its consequences
    _clean(warmed)
