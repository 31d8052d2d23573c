"""Unmatched layer rules: hit detection and a did-you-mean whose cost is bounded (counted, not timed)."""

import warnings
from types import SimpleNamespace

import pytest

from ort_partition import RuleUnmatchedWarning, _unmatched, assign_layers, closest_names, parse_rules


def _unmatched_messages(graph, name_rules):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assign_layers(graph, name_rules=name_rules)
    return [str(w.message) for w in caught if w.category is RuleUnmatchedWarning]


@pytest.fixture
def count_ratios(monkeypatch):
    calls = []
    real = _unmatched._ratio

    def counted(matcher):
        calls.append(1)
        return real(matcher)

    monkeypatch.setattr(_unmatched, "_ratio", counted)
    return calls


def test_thousands_of_unmatched_rules_cost_a_bounded_number_of_fuzzy_comparisons(static_decoder, count_ratios):
    model = static_decoder(layers=40)
    names = [n.name for n in model.graph.walk()]
    assert len(names) > 2000
    rules = ";".join(f"cuda(nm{i})" for i in range(5000))
    messages = _unmatched_messages(model.graph, rules)
    assert 0 < len(count_ratios) <= _unmatched.MAX_SUGGESTED * _unmatched.MAX_CANDIDATES
    assert len(messages) == _unmatched.MAX_SUGGESTED + 1
    assert "'cuda(nm0)' matches no node name; closest node names:" in messages[0]
    summary = messages[-1]
    assert summary.startswith(f"{5000 - _unmatched.MAX_SUGGESTED} more layer rules match no node name")
    assert "'cuda(nm8)'" in summary and "more" in summary


def test_closest_names_compares_a_bounded_deduplicated_candidate_set(count_ratios):
    targets = [f"/model/layers.{i % 7}/block_{i}/MatMul" for i in range(5000)]
    near = closest_names("layers.3", targets)
    assert near and "/model/layers.3/" in near[0]
    assert len(count_ratios) == _unmatched.MAX_CANDIDATES


def test_closest_names_still_prefers_segments_of_a_small_model():
    targets = ["/model/layers.0/attn/MatMul", "/model/layers.1/attn/MatMul", "/model/norm/Mul"]
    assert closest_names("layer.1", targets)[0] == "/model/layers.1/attn/MatMul"


@pytest.mark.parametrize(("mode", "pattern", "hit"), [
    ("name", "layers.1/at", True),
    ("name", "ers.0", True),
    ("name", "layers.2", False),
    ("name", "MatMul\0", False),
    ("annotation", "layers.1", True),
    ("annotation", "ayers.1", False),  # annotations match by prefix
    ("annotation", "=layers.0", True),
    ("annotation", "=layers.", False),
])
def test_hit_detection_matches_substring_prefix_and_exact(mode, pattern, hit):
    targets = ["/model/layers.0/attn/MatMul", "/model/layers.1/attn/MatMul"] if mode == "name" else ["layers.0", "layers.1"]
    rule = next(iter(parse_rules(f"cuda({pattern})"))) if "\0" not in pattern else SimpleNamespace(
        pattern=pattern, exact=False)
    assert _unmatched._Hits(targets, mode)(rule) is hit


def test_hit_detection_with_a_separator_inside_a_target():
    targets = ["odd\0name", "/model/layers.0/MatMul"]
    hits = _unmatched._Hits(targets, "name")
    assert hits(SimpleNamespace(pattern="d\0n", exact=False))
    assert hits(SimpleNamespace(pattern="layers.0", exact=False))
    assert not hits(SimpleNamespace(pattern="layers.1", exact=False))
