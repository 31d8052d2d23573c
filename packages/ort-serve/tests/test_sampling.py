"""Sampling: greedy equals argmax, each cut keeps what transformers' warpers keep, penalties as specified,
seeded draws repeat, stop strings end the text."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ort_serve import Sampler, SamplingError, SamplingParams, StopMatcher, generation_defaults


def _support(params: SamplingParams, logits, draws: int = 400) -> set[int]:
    s = Sampler(params)
    out = set()
    for _ in range(draws):
        out.add(s._draw(np.array(logits, np.float64) / params.temperature))
    return out


def test_greedy_is_argmax_with_the_lowest_id_on_ties():
    logits = np.array([0.5, 2.0, 2.0, -1.0], np.float32)
    assert Sampler(SamplingParams(temperature=0)).pick(logits) == 1
    assert Sampler(SamplingParams(top_k=1)).pick(logits) == 1


def test_top_k_top_p_min_p_keep_what_they_should():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    assert _support(SamplingParams(top_k=2, seed=0), logits) == {0, 1}
    # top_p 0.75: 0.5 + 0.3 reaches it; top_p 0.85 needs the third
    assert _support(SamplingParams(top_p=0.75, seed=0), logits) == {0, 1}
    assert _support(SamplingParams(top_p=0.85, seed=0), logits) == {0, 1, 2}
    # min_p 0.2: tokens below 0.2 * 0.5 = 0.1 are dropped
    assert _support(SamplingParams(min_p=0.2, seed=0), logits) == {0, 1, 2}
    assert _support(SamplingParams(top_p=1e-9, seed=0), logits) == {0}  # the most probable always stays


def test_draws_follow_the_distribution_and_repeat_with_a_seed():
    logits = np.log(np.array([0.7, 0.2, 0.1]))
    a = [Sampler(SamplingParams(seed=5)).pick(logits) for _ in range(3)]
    s1, s2 = Sampler(SamplingParams(seed=9)), Sampler(SamplingParams(seed=9))
    assert [s1.pick(logits) for _ in range(50)] == [s2.pick(logits) for _ in range(50)]
    s = Sampler(SamplingParams(seed=1))
    counts = np.bincount([s._draw(logits.copy()) for _ in range(4000)], minlength=3) / 4000
    np.testing.assert_allclose(counts, [0.7, 0.2, 0.1], atol=0.03)
    assert len(set(a)) == 1


def test_penalties():
    logits = np.array([2.0, -2.0, 1.0, 0.0])
    s = Sampler(SamplingParams(temperature=0, repetition_penalty=2.0), prompt_ids=[0, 1])
    got = s._penalized(logits.copy())
    np.testing.assert_allclose(got, [1.0, -4.0, 1.0, 0.0])  # positive divided, negative multiplied
    s = Sampler(SamplingParams(temperature=0, presence_penalty=0.5, frequency_penalty=0.25))
    s.accept(2)
    s.accept(2)
    np.testing.assert_allclose(s._penalized(logits.copy()), [2.0, -2.0, 1.0 - 0.5 - 0.5, 0.0])
    # a repeated token loses to the next one under a strong penalty
    s = Sampler(SamplingParams(temperature=0, repetition_penalty=10.0))
    assert s.pick(np.array([1.0, 0.5])) == 0 and s.pick(np.array([1.0, 0.5])) == 1


@pytest.mark.parametrize("field, value", [("temperature", -1), ("top_p", 0), ("top_p", 1.5), ("min_p", 2),
                                          ("top_k", -1), ("repetition_penalty", 0), ("presence_penalty", 3),
                                          ("seed", -1), ("max_new_tokens", 0), ("temperature", float("nan")),
                                          ("stop", [""])])
def test_out_of_range_parameters_are_named(field, value):
    with pytest.raises(SamplingError, match=field):
        SamplingParams(**{field: value})


def test_defaults_from_the_model_folder(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "eos_token_id": [2, 7]}))
    d = generation_defaults(tmp_path, {"search": {"top_k": 40, "temperature": 1.0}})
    assert d == {"top_k": 40, "temperature": 0.6, "top_p": 0.9, "eos_ids": (2, 7)}
    # no do_sample anywhere: greedy, as transformers and onnxruntime-genai decode by default
    assert generation_defaults(None, {"search": {"top_k": 40, "temperature": 0.7}})["temperature"] == 0.0
    assert generation_defaults(None)["temperature"] == 0.0
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": False, "temperature": 0.6}))
    assert generation_defaults(tmp_path)["temperature"] == 0.0
    assert SamplingParams(**generation_defaults(tmp_path)).greedy


def test_stop_strings_cut_the_text_and_hold_back_partial_matches():
    m = StopMatcher(["</s>", "\nUser:"])
    shown = [m.push(p) for p in ["Hello", " wor", "ld<", "/", "s> ignored"]]
    assert "".join(shown) == "Hello world" and m.done
    assert shown[2] == "ld"  # '<' may start '</s>': held back
    m = StopMatcher(["END"])
    assert m.push("abcE") == "abc" and m.flush() == "E"  # the stream ended: what was held is text after all
