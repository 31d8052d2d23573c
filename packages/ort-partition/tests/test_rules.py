import pytest

from ort_partition import RuleSyntaxError, parse_rules


def _pairs(text):
    return [(r.device, r.pattern, r.exact) for r in parse_rules(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cuda(layers.0)", [("cuda", "layers.0", False)]),
        ("  cuda (  layers.0 ,layers.1 )  ;  cpu(embed) ; ",
         [("cuda", "layers.0", False), ("cuda", "layers.1", False), ("cpu", "embed", False)]),
        ("gpu:1(=encoder, attention)", [("gpu:1", "encoder", True), ("gpu:1", "attention", False)]),
        ("cuda(= exact name )", [("cuda", "exact name", True)]),
        (";;cuda(a,,b);", [("cuda", "a", False), ("cuda", "b", False)]),
        ("CUDAExecutionProvider(lm_head)", [("CUDAExecutionProvider", "lm_head", False)]),
        ("", []),
        ("   ;  ", []),
    ],
)
def test_valid_rules(text, expected):
    assert _pairs(text) == expected


@pytest.mark.parametrize(
    ("text", "patterns"),
    [
        ("cuda(layers.[0-3])", ["layers.0", "layers.1", "layers.2", "layers.3"]),
        ("cuda(layers.[0-2]/)", ["layers.0/", "layers.1/", "layers.2/"]),
        ("cuda(layers.[ 8 - 10 ]/mlp)", ["layers.8/mlp", "layers.9/mlp", "layers.10/mlp"]),
        ("cuda(blk.[08-10])", ["blk.08", "blk.09", "blk.10"]),
        ("cuda(l[0-1].h[2-3])", ["l0.h2", "l0.h3", "l1.h2", "l1.h3"]),
        ("cuda(layers.[5-5]/)", ["layers.5/"]),
        ("cuda(/model/constant_nodes/INT64/[1])", ["/model/constant_nodes/INT64/[1]"]),  # literal brackets
    ],
)
def test_ranges_expand_in_order(text, patterns):
    rules = parse_rules(text)
    assert [r.pattern for r in rules] == patterns
    assert [r.index for r in rules] == list(range(len(patterns)))


def test_range_rules_keep_config_order_across_entries():
    rules = parse_rules("cuda(layers.[0-1]/); cpu(layers.[2-3]/)")
    assert [(r.device, r.pattern) for r in rules] == [
        ("cuda", "layers.0/"), ("cuda", "layers.1/"), ("cpu", "layers.2/"), ("cpu", "layers.3/")]
    assert rules.devices == ("cuda", "cpu")


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("cuda(layers.0", 13, "missing ')'"),
        ("cuda layers.0)", 13, "missing '('"),
        ("cudalayers.0", 12, "missing '('"),
        ("cuda(a) cpu(b)", 8, "after ')'"),
        ("(layers.0)", 0, "empty device"),
        ("  (layers.0)", 2, "empty device"),
        ("cu da(x)", 2, "invalid character ' '"),
        ("cu!da(x)", 2, "invalid character '!'"),
        ("cuda(a(b))", 6, "unexpected '('"),
        ("cuda(layers.[5-2])", 12, "backwards"),
        ("cuda(layers.[1-)", 12, "incomplete range"),
        ("cuda(layers.[1-x]/)", 12, "incomplete range"),
        ("cuda(a); cpu(a)", 13, "duplicate"),
        ("cuda(layers.[0-3]); cpu(layers.2)", 24, "duplicate"),
        ("cuda(=x); cpu(= x)", 14, "duplicate exact"),
        ("cuda(=)", 5, "'=' must be followed"),
        ("cuda(x)); cpu(y)", 7, "after ')'"),
    ],
)
def test_invalid_rules_point_at_the_column(text, column, fragment):
    with pytest.raises(RuleSyntaxError) as info:
        parse_rules(text)
    err = info.value
    assert err.column == column
    assert fragment in err.message
    lines = str(err).splitlines()
    assert lines[1] == "  " + text
    assert lines[2] == "  " + " " * column + "^"


def test_same_pattern_prefix_and_exact_is_allowed():
    rules = parse_rules("cuda(x); cpu(=x)")
    assert [(r.pattern, r.exact) for r in rules] == [("x", False), ("x", True)]


def test_huge_range_is_refused():
    with pytest.raises(RuleSyntaxError, match="expand to more than"):
        parse_rules("cuda(a[0-999].b[0-999])")


def test_rule_syntax_error_is_a_value_error():
    with pytest.raises(ValueError):
        parse_rules("cuda(")
