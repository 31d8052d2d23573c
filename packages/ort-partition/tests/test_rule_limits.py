"""Rule strings have bounded cost per string (not only per pattern): every limit raises RuleSyntaxError
quoting the limit, before the expansion is built."""

from __future__ import annotations

import time

import pytest

from ort_partition import RuleError, RuleSyntaxError, parse_rules
from ort_partition._rules import MAX_PATTERN_CHARS, MAX_PATTERNS, MAX_TEXT_CHARS


def _refused_fast(text: str, fragment: str) -> RuleSyntaxError:
    t0 = time.perf_counter()
    with pytest.raises(RuleSyntaxError, match=fragment) as info:
        parse_rules(text)
    assert time.perf_counter() - t0 < 1.0
    assert len(str(info.value)) < 1200  # a long string is shown around the column, not whole
    return info.value


@pytest.mark.parametrize("n", [5, 30])
def test_many_ranges_each_under_the_old_per_pattern_cap_are_refused_per_string(n):
    # each pattern expands to 90,000 (under the former per-pattern cap of 100,000): 20-30 s and GiBs before
    text = "; ".join(f"dev{i}(block{i}.[10000-99999]/)" for i in range(n))
    err = _refused_fast(text, f"more than {MAX_PATTERNS} patterns")
    assert "narrow the ranges" in err.message


def test_patterns_add_up_across_entries():
    half = MAX_PATTERNS // 2
    ok = f"cuda(a.[1-{half}]/); cpu(b.[1-{half}]/)"
    assert len(parse_rules(ok)) == 2 * half
    err = _refused_fast(ok + "; cpu(c.[0-1]/)", f"more than {MAX_PATTERNS} patterns")
    assert f"the patterns before it: {2 * half}" in err.message


def test_expanded_characters_are_capped():
    _refused_fast("cuda(" + "y" * 200 + "[0-9999])", f"more than {MAX_PATTERN_CHARS} characters")


def test_long_rule_string_is_refused_and_shown_cut():
    err = _refused_fast("cuda(" + ",".join(f"p{i}" for i in range(30_000)) + ")", f"limit of {MAX_TEXT_CHARS}")
    shown = str(err).splitlines()
    assert len(shown[1]) <= 210 and shown[2].endswith("^")


@pytest.mark.parametrize("bound", ["9" * 10, "9" * 4300])
def test_range_bounds_with_many_digits(bound):
    _refused_fast(f"cuda(l.[0-{bound}])", "more than 9 digits")


def test_error_in_a_long_string_points_at_the_column_in_the_shown_window():
    text = "cuda(" + ",".join(f"p{i}" for i in range(2000)) + ",l.[3-1])"
    err = _refused_fast(text, "backwards")
    line, caret = str(err).splitlines()[1:3]
    assert line[caret.index("^"):].startswith("[3-1]")


def test_non_string_rules_raise_rule_error():
    with pytest.raises(RuleError, match="must be a str"):
        parse_rules(b"cuda(x)")


def test_semantics_below_the_limits_are_unchanged():
    rules = parse_rules("cuda(l[0-1].h[2-3]); cpu(blk.[08-10])")
    assert [r.pattern for r in rules] == ["l0.h2", "l0.h3", "l1.h2", "l1.h3", "blk.08", "blk.09", "blk.10"]
    assert [r.source for r in rules][:1] == ["l[0-1].h[2-3]"]
