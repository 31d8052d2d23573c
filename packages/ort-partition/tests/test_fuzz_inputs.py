"""Property tests (fixed seeds, bounded): rule strings and budget strings are untrusted input. Every
outcome is a result or the package's typed error, each within a time limit."""

from __future__ import annotations

import time
import warnings

import pytest

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ort_partition import (  # noqa: E402
    BudgetError,
    LayeringIndex,
    PartitionError,
    Share,
    format_bytes,
    parse_budget,
    parse_bytes,
    parse_rules,
)
from ort_partition._matchers import AnnotationMatcher, NameMatcher  # noqa: E402

SECONDS = 2.0  # per case, generous for a shared CI core (the limits keep the worst case near 0.5 s)


def fuzz(max_examples: int) -> settings:
    """Fixed seed, no example database, our own per-case time limit instead of hypothesis' deadline."""
    return settings(derandomize=True, deadline=None, database=None, max_examples=max_examples,
                    suppress_health_check=[HealthCheck.too_slow])


NAMES = ["/model/layers.0/self_attn/q_proj/MatMul", "/model/layers.12/mlp/Mul", "/model/embed_tokens/Gather",
         "node_linear_3", "", "layers.7", "lm_head"]
EPS = ["CUDAExecutionProvider", "CPUExecutionProvider"]

_number = st.one_of(st.integers(0, 40).map(str), st.integers(0, 10**12).map(str), st.just("9" * 40),
                    st.sampled_from(["08", "0", "007"]))
_range = st.builds(lambda a, b: f"[{a}-{b}]", _number, _number) | st.builds(
    lambda a, n: f"[{a}-{a + n}]", st.integers(0, 100), st.integers(0, 400))
_literal = st.text(alphabet="abl./_0123456789 ", max_size=12)
_pattern = st.builds(lambda eq, parts: ("=" if eq else "") + "".join(parts), st.booleans(),
                     st.lists(st.one_of(_literal, _range, st.sampled_from(["[1]", "[", "]", "-", "[3-"])), max_size=4))
_device = st.sampled_from(["cuda", "cpu", "gpu:1", "CUDAExecutionProvider", "npu", "", "c d", "x!"])
_entry = st.builds(lambda d, ps, close: f"{d}({','.join(ps)}{')' if close else ''}", _device,
                   st.lists(_pattern, max_size=4), st.booleans())
_grammar_rules = st.builds(lambda es, sep: sep.join(es), st.lists(_entry, max_size=5), st.sampled_from([";", "; ", " ;;"]))
_random_rules = st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Z"]) | st.sampled_from(
    list("()[]-,;=:.0123456789")), max_size=200)


def _timed(fn):
    t0 = time.perf_counter()
    try:
        return fn()
    finally:
        assert time.perf_counter() - t0 < SECONDS


def _check_rules(text: str, graph) -> None:
    try:
        rules = _timed(lambda: parse_rules(text))
    except PartitionError:
        return
    def use():
        for mode in ("name", "annotation"):
            try:
                matcher = NameMatcher(rules) if mode == "name" else AnnotationMatcher(rules)
            except PartitionError:  # '=' patterns in name mode
                continue
            for name in NAMES:
                hit = matcher.match(name)
                assert hit is None or 0 <= hit < len(rules)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    index = LayeringIndex.create(graph, rules, mode, EPS)
            except PartitionError:
                continue
            assert set(index.rule_to_ep.values()) <= set(EPS)
    _timed(use)


@pytest.fixture(scope="module")
def graph():
    from ort_graph import zoo

    return zoo.decoder(zoo.DecoderConfig(layers=2, hidden=32, heads=2, kv_heads=2, vocab=64,
                                         layer_annotations=True)).graph


@fuzz(250)
@given(text=_grammar_rules)
def test_grammar_shaped_rule_strings(text, graph, fuzz_cases):
    fuzz_cases.add("rules")
    _check_rules(text, graph)


@fuzz(250)
@given(text=_random_rules)
def test_random_rule_strings(text, graph, fuzz_cases):
    fuzz_cases.add("rules")
    _check_rules(text, graph)


_unit = st.sampled_from(["", "b", "KB", "kib", "M", "GiB", "tb", "T", "EiB", "parsecs", "%"])
_amount = st.one_of(
    st.integers(-5, 10**25).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["1e400", "1e-400", "nan", "inf", "-0", ".5", "1" * 4300, "1e99999999999999999", "9" * 31]),
    st.decimals(allow_nan=False, allow_infinity=False).map(str))
_budget_entry = st.builds(lambda d, sep, a, u: f"{d}{sep}{a}{u}", st.sampled_from(["cuda", "gpu:1", "cpu", "", "cuda:0"]),
                          st.sampled_from([":", "=", " "]), _amount, _unit)
_budget = st.one_of(st.builds(", ".join, st.lists(_budget_entry, max_size=4)), st.text(max_size=80))


@fuzz(400)
@given(text=_budget)
def test_budget_strings_parse_to_bounded_bytes_or_budget_error(text, fuzz_cases):
    fuzz_cases.add("budgets")
    try:
        budgets = _timed(lambda: parse_budget(text))
    except BudgetError:
        return
    for _device, limit in budgets.limits:
        assert isinstance(limit, Share) and 0 < limit.fraction <= 1 or type(limit) is int and 0 <= limit <= 2**63 - 1


@fuzz(300)
@given(value=st.one_of(st.integers(), st.integers(min_value=2**62, max_value=2**20000), st.text(max_size=40), _amount))
def test_byte_sizes_and_format_bytes_never_raise_untyped(value, fuzz_cases):
    fuzz_cases.add("budgets")
    if isinstance(value, int):
        assert format_bytes(value).endswith("B")
    try:
        n = _timed(lambda: parse_bytes(value))
    except BudgetError:
        return
    assert 0 <= n <= 2**63 - 1
    assert format_bytes(n).endswith("B")
