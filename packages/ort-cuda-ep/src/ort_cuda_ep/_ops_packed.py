"""PackedAttention / PackedMultiHeadAttention claims (com.microsoft; kernels/packed_attention.cu,
PackedAttention's QKV projection through matmul.cu).

Claimed, float32 or float16 (the ops' type constraint) with int32 token_offset [B, S] and
cumulative_sequence_length [B + 1]:
- PackedAttention: input [T, Din], weights [Din, hid + hid + vhid], bias [hid + hid + vhid]
  (qkv_hidden_sizes, if given, with equal Q and K sizes), attention_bias [B or 1, H or 1, S, S]
  optional; attributes num_heads, scale, qkv_hidden_sizes.
- PackedMultiHeadAttention: query [T, hid] with key [T, hid] and value [T, vhid], or packed QKV
  query [T, H, 3, D] alone; bias [hid + hid + vhid] and attention_bias optional; attributes
  num_heads, scale, mask_filter_value (a masked key is left out of the softmax, which is what the
  filter value approximates).
Head sizes (hid / H, vhid / H) from 1 to 256.

Declined, naming the input or attribute: unknown ranks or dtypes, mixed float types, another
attribute, static shapes that contradict each other (hidden sizes, bias length, B + 1, the
attention_bias dims), hidden sizes that are not static, heads that do not divide them or give a
head size past 256, a missing mandatory input.
"""

from __future__ import annotations

from onnx import TensorProto

from ._ops import NodeFacts, OpSpec, Rejection, _dtypes, _extents_fit, _first, _floats, _ranks_known
from ._packed_recipe import MAX_HEAD_SIZE

__all__ = ["PACKED_SPECS", "PA_INPUTS", "PMHA_INPUTS"]

F32, F16, I32 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32
PA_INPUTS = ("input", "weights", "bias", "token_offset", "cumulative_sequence_length", "attention_bias")
PMHA_INPUTS = ("query", "key", "value", "bias", "token_offset", "cumulative_sequence_length", "attention_bias")
_CPU = "leave this node to the CPU EP (it is next in the list)"
_ATTRS = {"PackedAttention": {"num_heads", "scale", "qkv_hidden_sizes"},
          "PackedMultiHeadAttention": {"num_heads", "scale", "mask_filter_value"}}


def _static(d: object) -> bool:
    return isinstance(d, int)


def _differ(a: object, b: object) -> bool:
    return _static(a) and _static(b) and a != b


def _common(f: NodeFacts, names: tuple[str, ...], floats: tuple[int, ...], ranks: dict[int, tuple[int, ...]],
            required: tuple[int, ...]) -> Rejection | None:
    extra = [i for i in range(len(names), len(f.inputs)) if f.present(i)]
    if extra:
        return Rejection("input", f"inputs at positions {extra}", f"only {', '.join(names)}", "fix the model")
    for i in required:
        if not f.present(i):
            return Rejection("input", f"no {names[i]} (input {i})", f"a {names[i]} input", "fix the model")
    allowed = _ATTRS[f.op_type]
    for name in f.attrs:
        if name not in allowed:
            return Rejection("attribute", f"{name}={f.attrs[name]!r}", f"only the attributes {sorted(allowed)!r}", _CPU)
    h = f.attrs.get("num_heads")
    if not isinstance(h, int) or h <= 0:
        return Rejection("attribute", f"num_heads={h!r}", "a positive num_heads", "fix the model")
    every = tuple(range(len(names)))
    r = _first(_dtypes(f, {i: (F32, F16) for i in floats}), _floats(f, floats),
               _dtypes(f, {i: (I32,) for i in every if i not in floats}), _ranks_known(f, every), _extents_fit(f, every))
    if r:
        return r
    for i, want in ranks.items():
        if f.present(i) and f.rank(i) not in want:
            return Rejection("shape", f"{names[i]} (input {i}, {f.inputs[i]!r}) has shape {f.shapes[i]!r}",
                             f"a {' or '.join(map(str, want))}-D {names[i]}", "fix the model")
    return None


def _heads(f: NodeFacts, hid: object, vhid: object) -> Rejection | None:
    h = f.attrs["num_heads"]
    if not (_static(hid) and _static(vhid)) or hid % h or vhid % h or not (  # type: ignore[operator]
            1 <= hid // h <= MAX_HEAD_SIZE and 1 <= vhid // h <= MAX_HEAD_SIZE):  # type: ignore[operator]
        return Rejection("shape", f"hidden sizes {hid!r} (Q, K) and {vhid!r} (V) with num_heads={h}",
                         f"static hidden sizes that num_heads divides into heads of 1 to {MAX_HEAD_SIZE}",
                         "fix the model, or " + _CPU)
    return None


def _offsets(f: NodeFacts, i_off: int, tokens: object) -> Rejection | None:
    off, cum = f.shapes[i_off], f.shapes[i_off + 1]
    if _static(off[0]) and _static(cum[0]) and cum[0] != off[0] + 1:  # type: ignore[index,operator]
        return Rejection("shape", f"token_offset {off!r} with cumulative_sequence_length {cum!r}",
                         "cumulative_sequence_length [batch + 1] for token_offset [batch, sequence]", "fix the model")
    if f.present(i_off + 2):
        ab, h = f.shapes[i_off + 2], f.attrs["num_heads"]
        if (_static(ab[0]) and ab[0] != 1 and _differ(ab[0], off[0])) or (_static(ab[1]) and ab[1] not in (1, h)) \
                or _differ(ab[2], off[1]) or _differ(ab[3], off[1]):  # type: ignore[index]
            return Rejection("shape", f"attention_bias {ab!r} with token_offset {off!r} and num_heads={h}",
                             "attention_bias [batch or 1, num_heads or 1, sequence, sequence]", "fix the model")
    return None


def _packed_attention(f: NodeFacts, opset: int) -> Rejection | None:
    r = _common(f, PA_INPUTS, (0, 1, 2, 5), {0: (2,), 1: (2,), 2: (1,), 3: (2,), 4: (1,), 5: (4,)}, (0, 1, 2, 3, 4))
    if r:
        return r
    x, w, b = f.shapes[0], f.shapes[1], f.shapes[2]
    total = w[1]  # type: ignore[index]
    if _differ(x[1], w[0]) or _differ(b[0], total) or not _static(total):  # type: ignore[index]
        return Rejection("shape", f"input {x!r}, weights {w!r}, bias {b!r}",
                         "weights [input_hidden, hid + hid + v_hid] (static), bias of its columns", "fix the model")
    sizes = f.attrs.get("qkv_hidden_sizes")
    if sizes is not None:
        sizes = [int(v) for v in sizes]
        if len(sizes) != 3 or sizes[0] != sizes[1] or sum(sizes) != total:
            return Rejection("attribute", f"qkv_hidden_sizes={sizes!r} with weights {w!r}",
                             "three sizes, Q's equal to K's, summing to the weights' columns", "fix the model")
        hid, vhid = sizes[0], sizes[2]
    elif total % 3:  # type: ignore[operator]
        return Rejection("shape", f"weights {w!r} without qkv_hidden_sizes", "weights columns divisible by 3",
                         "fix the model, or set qkv_hidden_sizes")
    else:
        hid = vhid = total // 3  # type: ignore[operator]
    return _first(_heads(f, hid, vhid), _offsets(f, 3, x[0]))  # type: ignore[index]


def _packed_mha(f: NodeFacts, opset: int) -> Rejection | None:
    r = _common(f, PMHA_INPUTS, (0, 1, 2, 3, 6), {0: (2, 4), 1: (2,), 2: (2,), 3: (1,), 4: (2,), 5: (1,), 6: (4,)},
                (0, 4, 5))
    if r:
        return r
    q, h = f.shapes[0], f.attrs["num_heads"]
    if len(q) == 4:  # type: ignore[arg-type]
        if f.present(1) or f.present(2) or _differ(q[1], h) or _differ(q[2], 3):  # type: ignore[index]
            return Rejection("shape", f"packed QKV query {q!r} (key/value {'given' if f.present(1) else 'omitted'})",
                             "query [tokens, num_heads, 3, head_size] with key and value omitted", "fix the model")
        hid = vhid = h * q[3] if _static(q[3]) else q[3]  # type: ignore[index,operator]
    else:
        if not (f.present(1) and f.present(2)):
            return Rejection("input", "a 2-D query without key and value", "key and value with a 2-D query",
                             "fix the model")
        k, v = f.shapes[1], f.shapes[2]
        if any(_differ(a, b) for a, b in zip(q, k)) or _differ(v[0], q[0]):  # type: ignore[arg-type,index]
            return Rejection("shape", f"query {q!r}, key {k!r}, value {v!r}",
                             "key of query's shape, value with query's token count", "fix the model")
        hid, vhid = q[1], v[1]  # type: ignore[index]
    r = _heads(f, hid, vhid)
    if r:
        return r
    if f.present(3) and _differ(f.shapes[3][0], 2 * hid + vhid):  # type: ignore[index,operator]
        return Rejection("shape", f"bias {f.shapes[3]!r} for hidden sizes {hid}, {vhid}", "bias [hid + hid + v_hid]",
                         "fix the model")
    return _offsets(f, 4, q[0])  # type: ignore[index]


PACKED_SPECS = (OpSpec("PackedAttention", "com.microsoft", 1, None, "packed_attention", "packed_attention",
                       _packed_attention),
                OpSpec("PackedMultiHeadAttention", "com.microsoft", 1, None, "packed_attention", "packed_mha",
                       _packed_mha))
