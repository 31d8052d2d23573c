"""Benchmark helpers for the project's bench session. They measure and return numbers; they print
nothing and assert nothing about speed."""

from __future__ import annotations

import random
import time
from typing import Any

from ._matchers import NameMatcher
from ._rules import parse_rules


def _names(num_nodes: int, layers: int, rng: random.Random) -> list[str]:
    parts = ["self_attn/q_proj/MatMul", "self_attn/k_proj/MatMul", "self_attn/v_proj/MatMul", "self_attn/Softmax",
             "self_attn/o_proj/MatMul", "mlp/gate_proj/MatMul", "mlp/up_proj/MatMul", "mlp/down_proj/MatMul",
             "mlp/act_fn/Sigmoid", "input_layernorm/Mul_1", "post_attention_layernorm/Pow"]
    return [f"/model/layers.{rng.randrange(layers)}/{rng.choice(parts)}_{i}" for i in range(num_nodes)]


def matcher_throughput(num_nodes: int = 100_000, num_patterns: int = 256, strategies: tuple[str, ...] = ("automaton", "loop"),
                       seed: int = 0) -> dict[str, Any]:
    """Match `num_nodes` HF-style node names against `num_patterns` layer patterns (`layers.N/`)
    with each strategy; returns names/second per strategy and whether all strategies agreed."""
    rng = random.Random(seed)
    layers = max(1, num_patterns)
    half = max(1, num_patterns // 2)
    text = f"cuda(layers.[0-{half - 1}]/)" + (f"; cpu(layers.[{half}-{num_patterns - 1}]/)" if num_patterns > half else "")
    rules = parse_rules(text)
    names = _names(num_nodes, layers, rng)
    result: dict[str, Any] = {"num_nodes": num_nodes, "num_patterns": len(rules), "strategies": {}}
    answers: dict[str, list[int | None]] = {}
    for strategy in strategies:
        t0 = time.perf_counter()
        matcher = NameMatcher(rules, strategy)
        build = time.perf_counter() - t0
        t1 = time.perf_counter()
        answers[strategy] = [matcher.match(n) for n in names]
        seconds = time.perf_counter() - t1
        result["strategies"][strategy] = {
            "build_seconds": build, "match_seconds": seconds,
            "names_per_second": num_nodes / seconds if seconds > 0 else float("inf"),
        }
    first = next(iter(answers.values()), [])
    result["agree"] = all(a == first for a in answers.values())
    result["matched"] = sum(a is not None for a in first)
    return result
