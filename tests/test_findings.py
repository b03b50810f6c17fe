"""lesson.findings: the one vocabulary, the layer a parameter names, and cause-first order."""
from __future__ import annotations

import json

import pytest

from lesson.findings import (AREAS, CODES, EXPLAINS, TOOLS, Code, Finding, Severity, layer_of,
                             sort_findings)


@pytest.mark.parametrize("name, layer", [
    ("fc1.weight", "fc1"), ("encoder.layers.0.linear1.bias", "encoder.layers.0.linear1"),
    ("scale", ""), ("fc1.parametrizations.weight.original0", "fc1"),
    ("parametrizations.weight.original0", ""),
    ("block.parametrizations.weight.original1", "block"),
    ("myparametrizations.weight", "myparametrizations"),
])
def test_layer_of_names_the_module_that_holds_the_parameter(name, layer):
    assert layer_of(name) == layer


def test_every_code_is_well_formed_and_bad_codes_are_refused():
    assert set(EXPLAINS) <= set(CODES)
    assert all(c in CODES for targets in EXPLAINS.values() for c in targets)
    for code in CODES.values():
        assert code.area in AREAS and code.tool in TOOLS and code.fix and code.meaning
    with pytest.raises(ValueError, match="unknown area"):
        Code("X", "m", "f", Severity.INFO, "nowhere", "monitor")
    with pytest.raises(ValueError, match="unknown tool"):
        Code("X", "m", "f", Severity.INFO, "data", "crystal_ball")
    with pytest.raises(ValueError, match="unknown diagnosis code 'NOT_A_CODE'"):
        Finding("NOT_A_CODE", "x")
    assert Severity.INFO < Severity.WARNING < Severity.ERROR < Severity.CRITICAL


def test_a_finding_takes_the_codes_fix_and_severity_and_round_trips_as_json():
    f = Finding("DEAD_NEURONS", "60% dead", layer="fc1", evidence={"dead_fraction": 0.6},
                step=3)
    assert f.advice == CODES["DEAD_NEURONS"].fix and f.severity == CODES["DEAD_NEURONS"].severity
    assert Finding("DEAD_NEURONS", "x", advice="mine").advice == "mine"
    assert str(f) == "DEAD_NEURONS [fc1]: 60% dead"
    assert str(Finding("NAN_OR_INF", "nan")) == "NAN_OR_INF: nan"
    f.explains = ("COLLAPSED_ACTIVATIONS",)
    data = json.loads(json.dumps(f.to_dict()))
    assert data["severity"] == f.severity.name and data["explains"] == ["COLLAPSED_ACTIVATIONS"]
    back = Finding.from_dict(data)
    assert back == f and back.explains == ("COLLAPSED_ACTIVATIONS",)


def _codes(found):
    return [(f.code, f.explained_by, f.explains) for f in found]


def test_a_cause_comes_first_and_links_to_what_it_explains():
    out = sort_findings([Finding("NAN_OR_INF", "n", step=9),
                         Finding("NONFINITE_INPUT", "i", step=9)])
    assert _codes(out) == [("NONFINITE_INPUT", None, ("NAN_OR_INF",)),
                           ("NAN_OR_INF", "NONFINITE_INPUT", ())]


def test_a_chain_of_explanations_is_ordered_by_depth():
    found = [Finding("NAN_OR_INF", "n", step=30), Finding("LR_TOO_HIGH", "l", step=20),
             Finding("MISSING_ZERO_GRAD", "m", step=20), Finding("DEAD_NEURONS", "d")]
    out = sort_findings(found)
    assert [f.code for f in out] == ["MISSING_ZERO_GRAD", "LR_TOO_HIGH", "NAN_OR_INF",
                                     "DEAD_NEURONS"]     # depth 0, 1, then 2 by severity
    by = {f.code: f.explained_by for f in out}
    assert by == {"MISSING_ZERO_GRAD": None, "DEAD_NEURONS": "LR_TOO_HIGH",
                  "LR_TOO_HIGH": "MISSING_ZERO_GRAD", "NAN_OR_INF": "LR_TOO_HIGH"}
    assert out[1].explains == ("NAN_OR_INF", "DEAD_NEURONS")
    assert all(f.explained_by is None and f.explains == () for f in found)   # copies


def test_of_two_codes_that_explain_each_other_the_one_seen_first_is_the_cause():
    early_act = [Finding("LR_TOO_HIGH", "l", step=40), Finding("EXPLODING_ACTIVATIONS", "a",
                                                                 step=10)]
    assert [f.code for f in sort_findings(early_act)] == ["EXPLODING_ACTIVATIONS",
                                                          "LR_TOO_HIGH"]
    early_lr = [Finding("LR_TOO_HIGH", "l", step=5), Finding("EXPLODING_ACTIVATIONS", "a",
                                                               step=10)]
    assert [f.code for f in sort_findings(early_lr)] == ["LR_TOO_HIGH", "EXPLODING_ACTIVATIONS"]
    from_start = [Finding("LR_TOO_HIGH", "l", step=0), Finding("EXPLODING_ACTIVATIONS", "a")]
    assert sort_findings(from_start)[0].code == "EXPLODING_ACTIVATIONS"   # None: the start
    tie = [Finding("EXPLODING_ACTIVATIONS", "a", step=3), Finding("LR_TOO_HIGH", "l", step=3)]
    assert sort_findings(tie)[0].code == "LR_TOO_HIGH"    # listed first in EXPLAINS


def test_unrelated_findings_sort_by_severity_then_teaching_order():
    order = list(CODES)
    found = [Finding(c, c) for c in ("OVERFITTING", "NAN_OR_INF", "CLASS_IMBALANCE",
                                     "DEAD_NEURONS")]
    out = [f.code for f in sort_findings(found)]
    assert out == sorted(out, key=lambda c: (-CODES[c].severity, order.index(c)))
    assert sort_findings([]) == []


def test_the_vocabulary_cannot_be_rewritten_through_a_code():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        CODES["DEAD_NEURONS"].fix = "ignore it"
