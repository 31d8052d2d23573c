import numpy as np
import onnxruntime as ort

from ort_graph import zoo
from ort_session import InferenceSession
from ort_session._generate import generate, generation_max_shapes

CFG = zoo.DecoderConfig(layers=2)


def _greedy_reference(prompt, steps):
    """The same greedy loop on onnxruntime, re-running the whole sequence each step (no cache)."""
    sess = ort.InferenceSession(zoo.decoder_proto(CFG).SerializeToString())
    ids, out = list(prompt), []
    for _ in range(steps):
        feeds = {"input_ids": np.array([ids], np.int64),
                 **{f"past_key_values.{i}.{k}": np.zeros((1, CFG.kv_heads, 0, CFG.head_dim), np.float32)
                    for i in range(CFG.layers) for k in ("key", "value")}}
        token = int(np.argmax(sess.run(["logits"], feeds)[0][0, -1]))
        out.append(token)
        ids.append(token)
    return out


def test_generation_max_shapes_cover_prefill_and_every_decode_step():
    maxes = generation_max_shapes(zoo.decoder(CFG), prompt_len=5, max_total=12)
    assert maxes["input_ids"] == [1, 5]
    assert maxes["past_key_values.0.key"] == [1, CFG.kv_heads, 11, CFG.head_dim]


def test_kv_cache_decoding_matches_full_recompute_with_zero_allocations_per_token():
    prompt = [3, 17, 42, 7, 99]
    maxes = generation_max_shapes(zoo.decoder(CFG), len(prompt), len(prompt) + 6)
    sess = InferenceSession(zoo.decoder(CFG), {"max_shapes": maxes, "session.pre_allocate_execution_buffers": "1"})
    tokens = []
    for token in generate(sess, prompt, max_new_tokens=6):
        assert sess.last_run_stats.allocations == 0 and sess.last_run_stats.layout == "pre-allocated"
        tokens.append(token)
    assert tokens == _greedy_reference(prompt, 6)
