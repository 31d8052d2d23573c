"""Claims for Where, IsNaN, Sin/Cos's neighbours in masks and norms, and row reductions (ReduceMean,
ReduceSum over the trailing axes), so torch exports keep their attention masking and unfused norms on
the device. Reduction axes given as an input are a host input and must be known at initialization
(an initializer) so the claim can check they are trailing."""

from __future__ import annotations

from onnx import TensorProto

from ._ops import MAX_RANK, NodeFacts, OpSpec, Rejection, _dtypes, _first, _ranks_known
from ._ops_movement import _float_data

__all__ = ["WHERE_REDUCE_SPECS", "reduce_axes"]

BOOL = TensorProto.BOOL


def _where(f: NodeFacts, opset: int) -> Rejection | None:
    return _first(_dtypes(f, {0: (BOOL,)}), _float_data(f, (1, 2)), _ranks_known(f, (0, 1, 2), MAX_RANK))


def _isnan(f: NodeFacts, opset: int) -> Rejection | None:
    return _first(_float_data(f), _ranks_known(f, (0,), 64))


def reduce_axes(f: NodeFacts) -> tuple[list[int] | None, Rejection | None]:
    """The reduced axes (None: all), or why they cannot be known at initialization."""
    if "axes" in f.attrs:
        return list(f.attrs["axes"]), None
    if f.present(1):
        if 1 not in f.consts:
            return None, Rejection("input", f"axes input {f.inputs[1]!r} computed at run time",
                                   "axes given as an attribute or an initializer", "leave this node to the CPU EP")
        return list(f.consts[1]), None
    return None, None


def _reduce(f: NodeFacts, opset: int) -> Rejection | None:
    r = _first(_float_data(f), _ranks_known(f, (0,), 64))
    if r:
        return r
    axes, why = reduce_axes(f)
    if why:
        return why
    if not axes and f.attrs.get("noop_with_empty_axes", 0):
        return Rejection("attribute", "noop_with_empty_axes=1 with no axes", "a reduction", "drop the node (it is a no-op)")
    rank = f.rank(0) or 0
    if axes and any(not -rank <= a < rank for a in axes):
        return Rejection("attribute", f"axes {axes!r} for rank {rank}", f"axes in [-{rank}, {rank})", "fix the model")
    norm = sorted({a % rank for a in axes}) if axes else list(range(rank))
    if norm != list(range(rank - len(norm), rank)):
        return Rejection("attribute", f"axes {axes!r} of a rank-{rank} input", "the trailing axes (a row reduction)",
                         "transpose the reduced axes last, or leave this node to the CPU EP")
    return None


def _spec(op: str, since: int, until: int | None, kernel: str, check, host_inputs: tuple[int, ...] = ()) -> OpSpec:
    return OpSpec(op, "", since, until, kernel, "none", check, host_inputs)


WHERE_REDUCE_SPECS: tuple[OpSpec, ...] = (
    _spec("Where", 9, None, "where", _where),
    _spec("IsNaN", 9, None, "where", _isnan),
    _spec("ReduceMean", 1, 17, "reduce", _reduce),
    _spec("ReduceMean", 18, None, "reduce", _reduce, (1,)),
    _spec("ReduceSum", 1, 12, "reduce", _reduce),
    _spec("ReduceSum", 13, None, "reduce", _reduce, (1,)),
)
