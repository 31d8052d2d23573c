"""Claims for the data-movement ops (Reshape, Squeeze, Unsqueeze, Flatten, Transpose, Slice, Expand,
Concat, Gather, Cast, Shape), so whole decoder layers stay on the device instead of bouncing every
reshape through the host.

Their shape-like inputs (Reshape's shape, Slice's starts/ends/axes/steps, Expand's shape, the axes of
Squeeze/Unsqueeze) are *host inputs* and Shape's output is a *host output*, as ONNX Runtime's CUDA EP
marks them (OrtMemTypeCPUInput / CPUOutput): the session keeps those values in host memory, with no
copy. Data must be float32/float16/bfloat16: integer tensors are shape arithmetic, and they stay on the CPU EP
with the nodes that read them on the host (Gather's indices and Cast's source may be integers).
"""

from __future__ import annotations

from onnx import TensorProto

from ._ops import FLOATS, MAX_RANK, NodeFacts, OpSpec, Rejection, _dtypes, _first, _floats, _ranks_known

__all__ = ["MOVEMENT_SPECS", "CAST_TYPES"]

I32, I64 = TensorProto.INT32, TensorProto.INT64
CAST_TYPES = {TensorProto.FLOAT: "f32", TensorProto.FLOAT16: "f16", TensorProto.BFLOAT16: "bf16", I32: "i32", I64: "i64"}
_SHAPE_MATH = "integer tensors are shape arithmetic: leave this node to the CPU EP with the nodes that read it"


def _float_data(f: NodeFacts, idx: tuple[int, ...] = (0,)) -> Rejection | None:
    r = _dtypes(f, {i: FLOATS for i in idx})
    if r is not None and r.aspect == "dtype" and "unknown" not in r.detail:
        return Rejection("dtype", r.detail, "float32/float16/bfloat16 data", r.remedy)
    return r or _floats(f, idx)


def _flat(f: NodeFacts, opset: int) -> Rejection | None:
    """Reshape / Squeeze / Unsqueeze / Flatten: a flat copy (none when planned in place)."""
    return _first(_float_data(f), _ranks_known(f, (0,), 64), _host_ints(f, (1,)))


def _host_ints(f: NodeFacts, idx: tuple[int, ...]) -> Rejection | None:
    """Host inputs holding int64 (or int32) values: shapes, axes, slice bounds."""
    return _dtypes(f, {i: (I64, I32) for i in idx})


def _transpose(f: NodeFacts, opset: int) -> Rejection | None:
    r = _first(_float_data(f), _ranks_known(f, (0,)))
    perm = f.attrs.get("perm")
    rank = f.rank(0)
    if r is None and perm is not None and sorted(perm) != list(range(rank or 0)):
        return Rejection("attribute", f"perm={list(perm)!r} for rank {rank}", "a permutation of the input's axes",
                         "fix the model")
    return r


def _slice(f: NodeFacts, opset: int) -> Rejection | None:
    return _first(_float_data(f), _ranks_known(f, (0,)), _host_ints(f, (1, 2, 3, 4)))


def _expand(f: NodeFacts, opset: int) -> Rejection | None:
    r = _first(_float_data(f), _ranks_known(f, (0,)), _host_ints(f, (1,)))
    if r:
        return r
    target = f.shapes[1] if len(f.shapes) > 1 else None
    if target is None or len(target) != 1 or not isinstance(target[0], int) or target[0] > MAX_RANK:
        return Rejection("shape", f"shape input {f.inputs[1] if len(f.inputs) > 1 else ''!r} of shape {target!r}",
                         f"a 1-D shape input of static length <= {MAX_RANK}", "resolve shapes first, or use the CPU EP")
    return None


def _concat(f: NodeFacts, opset: int) -> Rejection | None:
    idx = tuple(range(len(f.inputs)))
    r = _first(_float_data(f, idx), _ranks_known(f, idx))
    if r is None and "axis" not in f.attrs:
        return Rejection("attribute", "no axis", "Concat's required axis attribute", "fix the model")
    return r


def _gather(f: NodeFacts, opset: int) -> Rejection | None:
    return _first(_float_data(f), _dtypes(f, {1: (I32, I64)}), _ranks_known(f, (0, 1), 64))


def _cast(f: NodeFacts, opset: int) -> Rejection | None:
    src, to = (f.dtypes[0] if f.dtypes else 0), f.attrs.get("to")
    names = "float32/float16/bfloat16/int32/int64"
    if src not in CAST_TYPES or to not in CAST_TYPES:
        from ort_graph import dtype_name

        got = f"{dtype_name(src) if src else 'unknown'} -> {dtype_name(to) if isinstance(to, int) and to else to!r}"
        return Rejection("dtype", f"cast {got}", f"casts between {names}", "leave this node to the CPU EP")
    if src not in FLOATS and to not in FLOATS:
        return Rejection("dtype", "an integer -> integer cast", "casts to or from float32/float16/bfloat16", _SHAPE_MATH)
    return _ranks_known(f, (0,), 64)


def _shape(f: NodeFacts, opset: int) -> Rejection | None:
    """Only the input's shape is read (its data stays on the device); the output is a host value."""
    return _float_data(f)


def _spec(op: str, since: int, until: int | None, check, host_inputs: tuple[int, ...] = (),
          host_outputs: tuple[int, ...] = ()) -> OpSpec:
    return OpSpec(op, "", since, until, "movement", "none", check, host_inputs, host_outputs)


MOVEMENT_SPECS: tuple[OpSpec, ...] = (
    _spec("Reshape", 5, None, _flat, (1,)),
    _spec("Squeeze", 1, 12, _flat),
    _spec("Squeeze", 13, None, _flat, (1,)),
    _spec("Unsqueeze", 1, 12, _flat),
    _spec("Unsqueeze", 13, None, _flat, (1,)),
    _spec("Flatten", 1, None, _flat),
    _spec("Transpose", 1, None, _transpose),
    _spec("Slice", 1, 9, _slice),
    _spec("Slice", 10, None, _slice, (1, 2, 3, 4)),
    _spec("Expand", 8, None, _expand, (1,)),
    _spec("Concat", 4, None, _concat),
    _spec("Gather", 1, None, _gather),
    _spec("Cast", 6, None, _cast),
    _spec("Shape", 1, None, _shape, (), (0,)),
)
