"""Host-side launch code of com.microsoft GroupQueryAttention (kernels in gqa.cu).

Two launches, three with a split: ``gqa_present`` fills present_key/present_value (past rows, the
rotated new keys and the new values at each batch entry's positions, zeros after), then
``gqa_attn`` rotates each query row in shared memory and attends over present with the grouped
head mapping and the causal offset, writing the output or split partials that ``gqa_combine``
merges. total_sequence_length is a host input: the present length ``max(total, P)`` is known here
without a device read; seqlens_k stays on the device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ort_abi import DeviceTensor

from ._compile import DTYPE_SUFFIX as _SUFFIX
from ._errors import KernelLaunchError
from ._gqa_recipe import gqa_head_size, gqa_recipe, gqa_split_plan
from ._runtime import CudaRuntime, DeviceArray, f32, i32, i64, ptr

__all__ = ["gqa"]



def _host_scalar(rt: CudaRuntime, value: Any) -> int:
    """total_sequence_length: a host array in a session (a host input); a device tensor is copied back."""
    arr = rt.to_host(value) if isinstance(value, DeviceTensor) else np.asarray(value)
    if arr.size != 1 or arr.dtype != np.int32:
        raise KernelLaunchError(f"GroupQueryAttention: total_sequence_length must be one int32 value, got "
                                f"{arr.dtype} of shape {arr.shape!r}")
    return int(arr.reshape(-1)[0])


def _overlaps(a: DeviceArray, b: DeviceArray | None) -> bool:
    return b is not None and a.nbytes > 0 and b.nbytes > 0 and a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes


def gqa(rt: CudaRuntime, new: Callable[[int, tuple[int, ...], np.dtype], DeviceArray], node: str,
        inputs: Sequence[Any], attrs: Mapping[str, Any], workspace: Callable[[int], int]) -> list[DeviceArray]:
    """Run one GroupQueryAttention node; ``workspace(nbytes)`` returns the planned or scratch pointer."""
    q, k, v, past_k, past_v, seqlens, total, cos, sin = (list(inputs) + [None] * 9)[:9]
    if q is None or seqlens is None or total is None:
        raise KernelLaunchError("GroupQueryAttention: query, seqlens_k and total_sequence_length are required")
    if q.dtype not in _SUFFIX or any(t is not None and t.dtype != q.dtype for t in (k, v, past_k, past_v, cos, sin)):
        raise KernelLaunchError(f"GroupQueryAttention: inputs must share one float type (float32/float16/bfloat16), query is "
                                f"{q.dtype}")
    sfx = _SUFFIX[q.dtype]
    H, Hkv = int(attrs["num_heads"]), int(attrs["kv_num_heads"])
    B, S, hidden = q.shape
    packed = k is None
    D = gqa_head_size(hidden, H, Hkv, packed)
    if D is None:
        raise KernelLaunchError(f"GroupQueryAttention: query {q.shape!r} does not split into num_heads={H}, "
                                f"kv_num_heads={Hkv} heads of size <= 256")
    if not packed and (k.shape != (B, S, Hkv * D) or v is None or v.shape != k.shape):
        raise KernelLaunchError(f"GroupQueryAttention: key {k.shape!r} / value {None if v is None else v.shape!r} "
                                f"for query {q.shape!r}; expected [{B}, {S}, {Hkv * D}]")
    P = 0
    if past_k is not None:
        P = past_k.shape[2]
        if past_k.shape != (B, Hkv, P, D) or past_v is None or past_v.shape != past_k.shape:
            raise KernelLaunchError(f"GroupQueryAttention: past_key {past_k.shape!r} / past_value "
                                    f"{None if past_v is None else past_v.shape!r}; expected [{B}, {Hkv}, past, {D}]")
    if seqlens.dtype != np.int32 or seqlens.shape != (B,):
        raise KernelLaunchError(f"GroupQueryAttention: seqlens_k must be int32 [{B}], got {seqlens.dtype} "
                                f"{seqlens.shape!r}")
    tot = _host_scalar(rt, total)
    T = max(tot, P, 0)
    rotary_half = cos_rows = 0
    if int(attrs.get("do_rotary", 0)):
        rotary_half = cos.shape[1]
        cos_rows = min(cos.shape[0], sin.shape[0])
        if sin.shape[1] != rotary_half or not 1 <= 2 * rotary_half <= D:
            raise KernelLaunchError(f"GroupQueryAttention: cos_cache {cos.shape!r} / sin_cache {sin.shape!r} for "
                                    f"head size {D}")
        if cos_rows < max(tot, 1):  # as onnxruntime: every position below total_sequence_length needs a row
            raise KernelLaunchError(f"GroupQueryAttention: cos_cache/sin_cache have {cos_rows} rows but "
                                    f"total_sequence_length is {tot}; the caches must cover every position "
                                    "(export with a larger max length)")
    recipe = gqa_recipe(B, S, P, H, D, rt.device.profile.sm_count, Hkv)  # fast decode: splits chosen by Hkv
    if recipe is None:
        raise KernelLaunchError(f"GroupQueryAttention: query {q.shape!r} is out of range for the kernel")

    out = new(0, (B, S, H * D), q.dtype)
    present_k = new(1, (B, Hkv, T, D), q.dtype)
    present_v = new(2, (B, Hkv, T, D), q.dtype)
    for o in (present_k, present_v):
        if any(_overlaps(o, t) for t in (q, k, v, past_k, past_v, cos, sin)):
            raise KernelLaunchError("GroupQueryAttention: present_key/present_value share memory with an input "
                                    "(past/present buffer sharing is not supported)")

    row = hidden  # elements per token row of the tensor holding the new keys and values
    k_src, v_src = (q, q) if packed else (k, v)
    k_off, v_off = (H * D, (H + Hkv) * D) if packed else (0, 0)
    rot = [ptr(cos if rotary_half else None), ptr(sin if rotary_half else None)]
    flags = [i32(rotary_half), i32(int(attrs.get("rotary_interleaved", 0))), i32(cos_rows)]
    n = B * Hkv * T * D
    if n:
        rt.launch("gqa", f"gqa_present_{sfx}", (max(1, min(math.ceil(n / 256), 1 << 20)),), (256,),
                  [ptr(k_src), ptr(v_src), i64(row if packed else Hkv * D), i64(k_off), i64(v_off), ptr(past_k),
                   ptr(past_v), ptr(seqlens), *rot, ptr(present_k), ptr(present_v), i32(B), i32(Hkv), i32(S), i32(P),
                   i32(T), i32(D), *flags])
    if out.size == 0:
        return [out, present_k, present_v]
    base = workspace(recipe.total_bytes)
    splits, per_split = gqa_split_plan(recipe, T)  # at most recipe.num_splits: the slot's layout holds them
    lse = base + recipe.lse_offset
    lse_acc = base + recipe.lse_accum_offset if splits > 1 else 0
    o_acc = base + recipe.out_accum_offset if splits > 1 else 0
    Dr = recipe.head_size_rounded
    scale = float(attrs.get("scale", 0.0)) or 1.0 / math.sqrt(D)
    rt.launch("gqa", f"gqa_attn_{sfx}", (B * H * S * splits,), (128,),
              [ptr(q), i64(row), ptr(present_k), ptr(present_v), ptr(seqlens), *rot, ptr(out), ptr(lse), ptr(lse_acc),
               ptr(o_acc), i32(B), i32(H), i32(Hkv), i32(S), i32(T), i32(D), i32(Dr), f32(scale), *flags, i32(splits),
               i32(per_split)])
    if splits > 1:
        rt.launch("gqa", f"gqa_combine_{sfx}", (B * H * S,), (128,),
                  [ptr(lse_acc), ptr(o_acc), ptr(out), ptr(lse), i32(B), i32(H), i32(S), i32(D), i32(Dr), i32(splits)])
    return [out, present_k, present_v]
