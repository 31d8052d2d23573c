"""Claims for com.microsoft GroupQueryAttention (what onnxruntime-genai's model builder exports).

Accepted: query [B, S, H*D] with key/value [B, S, Hkv*D], or packed QKV [B, S, (H + 2*Hkv)*D] with
key/value omitted; optional past_key/past_value [B, Hkv, P, D] (BNSH, copied into present, no
buffer sharing); seqlens_k int32 [B] (device); total_sequence_length int32 scalar (a *host input*:
the present length max(total, P) is read on the host); cos_cache/sin_cache [rows, R/2] with
2 <= R <= D when do_rotary=1 (ignored when do_rotary=0); float32, float16 or bfloat16 throughout; head size
<= 256; num_heads a multiple of kv_num_heads; outputs output, present_key, present_value.

Declined, with the attribute or input named: local_window_size != -1, softcap != 0,
smooth_softmax, causal=0, qk_output, a windowed or quantized KV cache, the optional inputs after
sin_cache (position_ids, attention_bias, head_sink, k/v scales, q/k norm weights, query_seqlens),
the output_qk output, omitted present outputs, unknown ranks or dtypes, mixed float types, and
static shapes that contradict each other.
"""

from __future__ import annotations

from onnx import TensorProto

from ._gqa_recipe import MAX_HEAD_SIZE
from ._ops import NodeFacts, OpSpec, Rejection, _dtypes, _extents_fit, _floats, _ranks_known

__all__ = ["GQA_SPEC", "GQA_INPUTS", "TOTAL_SEQUENCE_LENGTH"]

I32 = TensorProto.INT32
GQA_INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos_cache",
              "sin_cache")
TOTAL_SEQUENCE_LENGTH = 6  # the host input
_FLOAT_INPUTS = (0, 1, 2, 3, 4, 7, 8)
_CPU = "leave this node to the CPU EP (it is next in the list)"
# attribute -> the values this kernel runs (others decline); absent attributes take ORT's defaults
_FIXED = {"local_window_size": (-1,), "softcap": (0.0,), "smooth_softmax": (0,), "causal": (1,), "qk_output": (0,),
          "sliding_window_cache": (0,), "k_quant_type": ("NONE",), "v_quant_type": ("NONE",),
          "do_rotary": (0, 1), "rotary_interleaved": (0, 1)}
_FREE = {"num_heads", "kv_num_heads", "scale",
         # epsilons of the per-head Q/K norm, which only applies with q/k_norm_weight inputs (declined)
         "qk_norm_epsilon", "q_norm_epsilon", "k_norm_epsilon"}
_WHY = {"local_window_size": "sliding-window (local) attention", "softcap": "softcapped scores",
        "smooth_softmax": "smooth softmax", "causal": "bidirectional attention",
        "qk_output": "the QK output", "sliding_window_cache": "a windowed KV cache",
        "k_quant_type": "a quantized KV cache", "v_quant_type": "a quantized KV cache",
        "kv_cache_bit_width": "a quantized KV cache"}


def _text(v: object) -> object:
    return v.decode() if isinstance(v, bytes) else v


def _attributes(f: NodeFacts) -> Rejection | None:
    for name, value in f.attrs.items():
        value = _text(value)
        if name in _FIXED:
            if value not in _FIXED[name]:
                what = _WHY.get(name, name)
                return Rejection("attribute", f"{name}={value!r}" + (f" ({what})" if name in _WHY else ""),
                                 f"{name} in {list(_FIXED[name])!r}", _CPU)
        elif name not in _FREE:
            why = f" ({_WHY[name]})" if name in _WHY else ""
            return Rejection("attribute", f"{name}={value!r}{why}",
                             f"only the attributes {sorted({*_FIXED, *_FREE})!r}", _CPU)
    h, hkv = f.attrs.get("num_heads"), f.attrs.get("kv_num_heads")
    if not isinstance(h, int) or not isinstance(hkv, int) or h <= 0 or hkv <= 0 or h % hkv:
        return Rejection("attribute", f"num_heads={h!r}, kv_num_heads={hkv!r}",
                         "positive num_heads and kv_num_heads, num_heads a multiple of kv_num_heads", "fix the model")
    return None


def _inputs(f: NodeFacts) -> Rejection | None:
    extra = [i for i in range(len(GQA_INPUTS), len(f.inputs)) if f.present(i)]
    if extra:
        return Rejection("input", f"optional inputs at positions {extra} ({[f.inputs[i] for i in extra]!r}: "
                         "position_ids, attention_bias, head_sink, k/v scales, q/k norm weights or query_seqlens)",
                         f"only {', '.join(GQA_INPUTS)}", _CPU)
    for need in (0, 5, 6):
        if not f.present(need):
            return Rejection("input", f"no {GQA_INPUTS[need]} (input {need})", f"a {GQA_INPUTS[need]} input",
                             "fix the model")
    for a, b in ((1, 2), (3, 4), (7, 8)):
        if f.present(a) != f.present(b):
            return Rejection("input", f"{GQA_INPUTS[a]} {'without' if f.present(a) else 'omitted with'} "
                             f"{GQA_INPUTS[b]}", f"{GQA_INPUTS[a]} and {GQA_INPUTS[b]} both present or both omitted",
                             "fix the model")
    if f.attrs.get("do_rotary", 0) == 1 and not f.present(7):
        return Rejection("input", "do_rotary=1 without cos_cache/sin_cache", "cos_cache and sin_cache with do_rotary=1",
                         "fix the model")
    outs = f.outputs
    if len(outs) > 3 and any(outs[3:]):
        return Rejection("output", f"output_qk (output 3, {outs[3]!r})", "outputs output, present_key, present_value",
                         "drop the output_qk output, or " + _CPU)
    if len(outs) < 3 or not outs[1] or not outs[2]:
        return Rejection("output", f"outputs {list(outs)!r} without present_key/present_value",
                         "present_key and present_value outputs (the attention reads the keys from them)", _CPU)
    return None


def _differ(a: object, b: object) -> bool:
    """Two extents that are provably different (both static). Symbols pass (the genai exports give the
    past head size as the symbol 'kv_cache_dim'); the launch checks the shapes it is given."""
    return isinstance(a, int) and isinstance(b, int) and a != b


def _shapes(f: NodeFacts) -> Rejection | None:
    want = {0: 3, 1: 3, 2: 3, 3: 4, 4: 4, 5: 1, 7: 2, 8: 2}
    for i, rank in want.items():
        if f.present(i) and f.rank(i) != rank:
            return Rejection("shape", f"{GQA_INPUTS[i]} (input {i}, {f.inputs[i]!r}) has shape {f.shapes[i]!r}",
                             f"a {rank}-D {GQA_INPUTS[i]}", "fix the model, or " + _CPU)
    tot = f.shapes[6]
    if tot is None or len(tot) > 1 or (len(tot) == 1 and tot[0] != 1):
        return Rejection("shape", f"total_sequence_length (input 6, {f.inputs[6]!r}) has shape {tot!r}",
                         "a scalar or one-element total_sequence_length", "fix the model")
    q = f.shapes[0]
    h, hkv = f.attrs["num_heads"], f.attrs["kv_num_heads"]
    packed = not f.present(1)
    hidden = q[2]  # type: ignore[index]
    parts = h + 2 * hkv if packed else h
    if not isinstance(hidden, int) or hidden % parts or not 1 <= hidden // parts <= MAX_HEAD_SIZE:
        layout = f"packed QKV ((num_heads + 2*kv_num_heads) * head_size = {parts} * head_size)" if packed else \
            f"num_heads * head_size ({h} * head_size)"
        return Rejection("shape", f"query hidden size {hidden!r} with num_heads={h}, kv_num_heads={hkv}",
                         f"a static query hidden size of {layout} with head_size <= {MAX_HEAD_SIZE}",
                         "fix the model, or " + _CPU)
    d = hidden // parts
    batch, seq = q[0], q[1]  # type: ignore[index]
    if not packed:
        for i in (1, 2):
            s = f.shapes[i]
            if _differ(s[0], batch) or _differ(s[1], seq) or _differ(s[2], hkv * d):  # type: ignore[index]
                return Rejection("shape", f"query {q!r} with {GQA_INPUTS[i]} {s!r}",
                                 f"{GQA_INPUTS[i]} [batch, sequence, kv_num_heads * head_size = {hkv * d}]",
                                 "fix the model")
    if f.present(3):
        pk, pv = f.shapes[3], f.shapes[4]
        for s in (pk, pv):
            if _differ(s[0], batch) or _differ(s[1], hkv) or _differ(s[3], d) or _differ(pk[2], pv[2]):  # type: ignore[index]
                return Rejection("shape", f"past_key {pk!r}, past_value {pv!r} for query {q!r}",
                                 f"past_key and past_value [batch, kv_num_heads = {hkv}, past, head_size = {d}] (BNSH)",
                                 "fix the model, or " + _CPU)
    if _differ(f.shapes[5][0], batch):  # type: ignore[index]
        return Rejection("shape", f"seqlens_k {f.shapes[5]!r} for batch {batch!r}", "seqlens_k [batch]",
                         "fix the model")
    if f.attrs.get("do_rotary", 0) == 1:
        cos, sin = f.shapes[7], f.shapes[8]
        half = cos[1]  # type: ignore[index]
        if not isinstance(half, int) or sin[1] != half or not 1 <= half or 2 * half > d:  # type: ignore[index]
            return Rejection("shape", f"cos_cache {cos!r}, sin_cache {sin!r} for head_size {d}",
                             "cos_cache and sin_cache [rows, rotary_dim / 2] with one static rotary_dim <= head_size",
                             "fix the model, or " + _CPU)
    return None


def _gqa(f: NodeFacts, opset: int) -> Rejection | None:
    every = tuple(range(len(GQA_INPUTS)))
    checks = (_attributes, _inputs, lambda f: _floats(f, _FLOAT_INPUTS), lambda f: _dtypes(f, {5: (I32,), 6: (I32,)}),
              lambda f: _ranks_known(f, every), lambda f: _extents_fit(f, every), _shapes)
    for check in checks:  # in order: each check may rely on the ones before it
        r = check(f)
        if r is not None:
            return r
    return None


GQA_SPEC = OpSpec("GroupQueryAttention", "com.microsoft", 1, None, "gqa", "gqa", _gqa,
                  host_inputs=(TOTAL_SEQUENCE_LENGTH,))
