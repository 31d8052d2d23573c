import random

import attrs
import pytest

from ort_partition import (
    AnnotationMatcher,
    NameMatcher,
    RuleError,
    derived_node_path,
    name_match_target,
    parse_rules,
)


def ann(text):
    return AnnotationMatcher(parse_rules(text))


@pytest.mark.parametrize(
    ("rules", "annotation", "expected"),
    [
        ("cuda(layers.1)", "layers.1", 0),
        ("cuda(layers.1)", "layers.10", 0),  # prefix
        ("cuda(layers.1)", "xlayers.1", None),  # prefix means from position 0
        ("cuda(layers.1)", "layers.", None),
        ("cuda(layers.10); cpu(layers.1)", "layers.10", 0),  # lowest index among prefix hits
        ("cuda(layers.1); cpu(layers.10)", "layers.10", 0),  # ... not the longest
        ("cuda(=layers.1); cpu(layers.1)", "layers.1", 1),  # exact only when no prefix matches
        ("cuda(=layers.1); cpu(layers.2)", "layers.1", 0),
        ("cuda(=layers.1)", "layers.10", None),
        ("cuda(a, =b); cpu(=c)", "c", 2),
        ("cuda(a)", None, None),
        ("cuda(a)", "", None),
    ],
)
def test_annotation_matcher(rules, annotation, expected):
    assert ann(rules).match(annotation) == expected


@pytest.mark.parametrize("strategy", ["loop", "automaton"])
@pytest.mark.parametrize(
    ("rules", "name", "expected"),
    [
        ("cuda(layers.1)", "/model/layers.1/mlp/MatMul", 0),
        ("cuda(layers.1); cpu(layers.10)", "/model/layers.10/mlp/MatMul", 1),  # longest wins
        ("cuda(layers.10); cpu(layers.1)", "/model/layers.10/mlp/MatMul", 0),
        ("cuda(layers.1/); cpu(mlp/)", "/model/layers.1/mlp/MatMul", 0),  # 9 > 4 chars
        ("cuda(mlp); cpu(/mlp)", "/model/layers.1/mlp/MatMul", 1),
        ("cuda(abc); cpu(mlp)", "/abc/mlp", 0),  # same length: first rule in config order
        ("cpu(mlp); cuda(abc)", "/abc/mlp", 0),
        ("cuda(q_proj, mlp)", "/x/q_proj", 0),
        ("cuda(layers.2/)", "/model/layers.12/mlp", None),
        ("cuda(x)", "", None),
    ],
)
def test_name_matcher(rules, name, expected, strategy):
    assert NameMatcher(parse_rules(rules), strategy).match(name) == expected


def test_name_matcher_refuses_exact_qualifier():
    with pytest.raises(RuleError, match=r"'=' exact-match qualifier.*'layers.0'.*remove the '='"):
        NameMatcher(parse_rules("cuda(=layers.0)"))


def test_name_matcher_auto_strategy_switches():
    assert NameMatcher(parse_rules("cuda(a,b)")).strategy == "loop"
    assert NameMatcher(parse_rules("cuda(layers.[0-128]/)")).strategy == "automaton"
    assert NameMatcher(parse_rules("cuda(layers.[0-127]/)")).strategy == "loop"


def test_automaton_agrees_with_loop_on_random_inputs():
    rng = random.Random(7)
    alphabet = "ab./1"
    for _ in range(30):
        pats = list({"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5))) for _ in range(rng.randint(1, 25))})
        rules = parse_rules("cuda(" + ",".join(pats) + ")")
        loop, auto = NameMatcher(rules, "loop"), NameMatcher(rules, "automaton")
        for _ in range(60):
            name = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
            got = auto.match(name)
            assert got == loop.match(name), (pats, name)
            if got is not None:  # and it really is the best: longest, then lowest index
                best = max((len(r.pattern), -r.index) for r in rules if r.pattern in name)
                assert (len(rules[got].pattern), -got) == best


@attrs.define(eq=False)
class FakeNode:
    name: str
    op_type: str = "MatMul"
    metadata: dict = attrs.field(factory=dict)


@pytest.mark.parametrize(
    ("scopes", "op", "path"),
    [
        ("['', 'model', 'model.layers.0', 'model.layers.0.self_attn', 'model.layers.0.self_attn.q_proj', 'linear']",
         "MatMul", "/model/layers.0/self_attn/q_proj/MatMul"),
        ("['', 'model', 'model.layers.12', 'model.layers.12.input_layernorm', 'rsqrt']", "Sqrt",
         "/model/layers.12/input_layernorm/Sqrt"),
        ("['', 'model', '_to_copy']", "Cast", "/model/Cast"),
        ("['', 'lm_head', 'linear_28']", "MatMul", "/lm_head/MatMul"),
        ("['', 'model', 'model.embed_tokens', 'embedding']", "Gather", "/model/embed_tokens/Gather"),
        ("['', 'add']", "Add", None),
        ("not a list", "Add", None),
    ],
)
def test_derived_path_from_dynamo_name_scopes(scopes, op, path):
    node = FakeNode("node_x_3", op, {"pkg.torch.onnx.name_scopes": scopes})
    assert derived_node_path(node) == path
    assert name_match_target(node) == (path or "node_x_3")


def test_derived_path_from_namespace_fallback():
    ns = ": transformers.LlamaForCausalLM/model: transformers.LlamaModel/model.layers.3: transformers.LlamaDecoderLayer/model.layers.3.mlp: transformers.LlamaMLP/mul: aten.mul.Tensor"
    node = FakeNode("node_mul_7", "Mul", {"namespace": ns})
    assert derived_node_path(node) == "/model/layers.3/mlp/Mul"


def test_names_with_a_path_are_matched_as_they_are():
    node = FakeNode("/model/layers.1/mlp/MatMul", metadata={"pkg.torch.onnx.name_scopes": "['', 'other']"})
    assert name_match_target(node) == "/model/layers.1/mlp/MatMul"


def test_a_fused_dynamo_node_keeps_the_path_of_its_scopes():
    """L1 fusions name their node after the first one they replace (`node_pow_1/SimplifiedLayerNormFusion/`):
    a '/' inside a dynamo name is not a path, the scopes still are."""
    scopes = "['', 'model', 'model.layers.0', 'model.layers.0.input_layernorm', 'pow_1']"
    node = FakeNode("node_pow_1/SimplifiedLayerNormFusion/", "SimplifiedLayerNormalization",
                    {"pkg.torch.onnx.name_scopes": scopes})
    assert name_match_target(node) == "/model/layers.0/input_layernorm/SimplifiedLayerNormalization"
    assert name_match_target(FakeNode("custom/node")) == "custom/node"  # no scopes: the name as it is
