"""Workspace recipes of PackedAttention and PackedMultiHeadAttention (com.microsoft), as the seeds
shape them: one 256-byte-aligned root per node.

- PackedAttention: ``align_up(projection_bytes, 256) + max(feasible attention routes)``. The
  projection is the QKV GEMM's output, ``itemsize * token_count * (hidden + hidden + v_hidden)``
  (input @ weights + bias, kept in the input's type), read by the attention in place.
- PackedMultiHeadAttention: ``max(feasible attention routes)`` (query/key/value are already
  projected; a bias is added as the kernel reads them).

This EP has one attention route, kernels/packed_attention.cu: an online softmax per (token, head)
over its own sequence's packed keys with the state in registers and shared memory, no padding
restored, no split-K. It needs **0 bytes**, so the max over the feasible routes is 0: the
PackedAttention root is exactly the aligned projection, and PackedMultiHeadAttention declares none.
(onnxruntime's TRT / memory-efficient / unfused routes, which pad Q/K/V and materialize scores,
are not implemented here, so they are not among the feasible routes.) Example: 100 tokens of
float16, hidden 768, v_hidden 768: projection 2 * 100 * 2304 = 460,800 B, root 460,800 B
(already a multiple of 256); 3 tokens of float32, hidden 8: 288 B -> root 512 B.

These graph-free recipes size exact zero (token_count 0: no projection, no launch, 0 bytes). The
Level-1/Level-2 adapters (``_workspace``) are stricter, as the seeds: a missing mandatory input, a
shapeless one, an unknown or zero extent, malformed geometry or overflow is *unavailable* (None).
"""

from __future__ import annotations

import attrs

from ._checked import add, align_up, dim, mul

__all__ = ["PackedDims", "packed_attention_dims", "packed_mha_dims", "PackedRecipe", "packed_attention_recipe", "packed_mha_recipe", "attention_route_bytes", "MAX_HEAD_SIZE"]

MAX_HEAD_SIZE = 256  # one query row in shared memory, two output dims per thread of 128


@attrs.define(frozen=True)
class PackedRecipe:
    """Offsets are bytes from the root's start; the attention region starts 256-byte aligned."""

    projection_offset: int
    projection_bytes: int
    attention_offset: int
    attention_bytes: int
    total_bytes: int


def attention_route_bytes(token_count: int, num_heads: int, head_size: int, v_head_size: int) -> int:
    """max over the feasible routes: the fused packed route is the only one, and it needs none."""
    return 0


def _heads(num_heads: object, hidden: object, v_hidden: object) -> tuple[int, int, int] | None:
    h, hid, vhid = dim(num_heads), dim(hidden), dim(v_hidden)
    if not h or not hid or not vhid or hid % h or vhid % h:
        return None
    if hid // h > MAX_HEAD_SIZE or vhid // h > MAX_HEAD_SIZE:
        return None
    return h, hid // h, vhid // h


def packed_attention_recipe(token_count: object, hidden: object, v_hidden: object, num_heads: object,
                            itemsize: object) -> PackedRecipe | None:
    """PackedAttention's root for one static token count, or None when malformed or overflowing."""
    t, item, heads = dim(token_count), dim(itemsize), _heads(num_heads, hidden, v_hidden)
    if t is None or not item or heads is None:
        return None
    proj = mul(item, t, add(hidden, hidden, v_hidden))  # type: ignore[arg-type]
    attn_off = align_up(proj)
    if proj is None or attn_off is None:
        return None
    attn = attention_route_bytes(t, *heads)
    total = add(attn_off, attn) if t else 0
    if total is None:
        return None
    return PackedRecipe(0, proj, attn_off if t else 0, attn, total)


def packed_mha_recipe(token_count: object, hidden: object, v_hidden: object, num_heads: object) -> PackedRecipe | None:
    """PackedMultiHeadAttention's root (the attention region alone), or None when malformed."""
    t, heads = dim(token_count), _heads(num_heads, hidden, v_hidden)
    if t is None or heads is None or mul(t, hidden, 1) is None:  # type: ignore[arg-type]
        return None
    attn = attention_route_bytes(t, *heads)
    return PackedRecipe(0, 0, 0, attn, attn)


@attrs.define(frozen=True)
class PackedDims:
    """The geometry a packed node's static shapes give."""

    token_count: int
    hidden: int
    v_hidden: int
    batch: int
    seq: int
    packed_qkv: bool = False  # PackedMultiHeadAttention's query [T, H, 3, D]


def _get(shapes, i: int, rank: int) -> tuple[int, ...] | None:
    s = shapes[i] if i < len(shapes) else None
    if s is None or len(s) != rank or any(dim(d) is None for d in s):
        return None
    return tuple(s)


def _offsets_ok(shapes, i_off: int, i_cum: int, i_bias_attn: int, t: int, h: int) -> tuple[int, int] | None:
    off, cum = _get(shapes, i_off, 2), _get(shapes, i_cum, 1)
    if off is None or cum is None or cum[0] != off[0] + 1 or mul(off[0], off[1]) is None or t > off[0] * off[1]:
        return None
    b, s = off
    ab = shapes[i_bias_attn] if i_bias_attn < len(shapes) else None
    if ab is not None:
        ab = _get(shapes, i_bias_attn, 4)
        if ab is None or ab[0] not in (1, b) or ab[1] not in (1, h) or ab[2:] != (s, s):
            return None
    return b, s


def packed_attention_dims(shapes, attrs_) -> PackedDims | None:
    """PackedAttention: input [T, Din], weights [Din, hid + hid + vhid], bias [that], token_offset
    [B, S], cumulative_sequence_length [B + 1], attention_bias [B or 1, H or 1, S, S] (optional)."""
    x, w, bias = _get(shapes, 0, 2), _get(shapes, 1, 2), _get(shapes, 2, 1)
    h = dim(attrs_.get("num_heads"))
    if x is None or w is None or bias is None or not h or w[0] != x[1] or bias[0] != w[1]:
        return None
    sizes = attrs_.get("qkv_hidden_sizes")
    if sizes is not None:
        sizes = tuple(int(v) for v in sizes)
        if len(sizes) != 3 or sizes[0] != sizes[1] or sum(sizes) != w[1]:
            return None
        hid, vhid = sizes[0], sizes[2]
    elif w[1] % 3:
        return None
    else:
        hid = vhid = w[1] // 3
    bs = _offsets_ok(shapes, 3, 4, 5, x[0], h)
    if bs is None or _heads(h, hid, vhid) is None:
        return None
    return PackedDims(x[0], hid, vhid, *bs)


def packed_mha_dims(shapes, attrs_) -> PackedDims | None:
    """PackedMultiHeadAttention: query [T, hid] with key [T, hid] and value [T, vhid], or packed QKV
    query [T, H, 3, D] without key/value; bias [hid + hid + vhid] (optional); token_offset [B, S],
    cumulative_sequence_length [B + 1]; attention_bias [B or 1, H or 1, S, S] (optional)."""
    h = dim(attrs_.get("num_heads"))
    q = shapes[0] if shapes else None
    if not h or q is None:
        return None
    k, v = (shapes[i] if i < len(shapes) else None for i in (1, 2))
    if len(q) == 4:
        q4 = _get(shapes, 0, 4)
        if q4 is None or k is not None or v is not None or q4[1] != h or q4[2] != 3:
            return None
        t, hid, vhid, packed = q4[0], h * q4[3], h * q4[3], True
    else:
        q2, k2, v2 = _get(shapes, 0, 2), _get(shapes, 1, 2), _get(shapes, 2, 2)
        if q2 is None or k2 is None or v2 is None or k2 != q2 or v2[0] != q2[0]:
            return None
        t, hid, vhid, packed = q2[0], q2[1], v2[1], False
    if len(shapes) > 3 and shapes[3] is not None:
        bias = _get(shapes, 3, 1)
        if bias is None or bias[0] != 2 * hid + vhid:
            return None
    bs = _offsets_ok(shapes, 4, 5, 6, t, h)
    if bs is None or _heads(h, hid, vhid) is None:
        return None
    return PackedDims(t, hid, vhid, *bs, packed)
