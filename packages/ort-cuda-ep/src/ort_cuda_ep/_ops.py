"""What the CUDA EP runs: op, domain, opset range, dtypes, shapes, attributes, kernel source.

``check_node`` returns None when the EP can run the node for every shape the graph allows, or a
``Rejection`` naming what was rejected, what is accepted, and a remedy. Claims are decided here,
before any kernel exists, so nothing the graph already says can make a claimed node fail later.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
from onnx import TensorProto

__all__ = ["OpSpec", "Rejection", "NodeFacts", "OP_SPECS", "find_spec", "check_node", "supported_ops",
           "BINARY_OPS", "UNARY_OPS", "MAX_RANK"]

F32, F16, BF16, U8 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.UINT8
FLOATS = (F32, F16, BF16)
MAX_RANK = 6
MAX_DIM = (1 << 31) - 1  # as _checked.MAX_DIM: kernels index one dimension with a 32-bit int
BINARY_OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Pow": 4}
UNARY_OPS = {"Relu": 0, "Sigmoid": 1, "Tanh": 2, "Neg": 3, "Exp": 4, "Log": 5, "Sqrt": 6, "Abs": 7, "Erf": 8,
             "Reciprocal": 9, "Gelu": 10, "Identity": 12, "Sin": 13, "Cos": 14}


@attrs.define(frozen=True)
class Rejection:
    """Why a node is declined: the rejected aspect and value, what is accepted, and a remedy."""

    aspect: str  # "op", "dtype", "shape", "attribute", "input", "device"
    detail: str
    accepts: str
    remedy: str


@attrs.define(frozen=True)
class NodeFacts:
    """What a claim needs from a node, independent of the graph library."""

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]  # '' for an omitted optional input
    dtypes: tuple[int, ...]  # 0 unknown
    shapes: tuple[tuple[object, ...] | None, ...]  # None: unknown rank or omitted
    attrs: Mapping[str, Any]
    outputs: tuple[str, ...] = ()  # '' for an omitted optional output
    consts: Mapping[int, tuple[int, ...]] = attrs.field(factory=dict)  # small integer initializer inputs (axes, ...)

    @classmethod
    def from_node(cls, node) -> NodeFacts:
        values = node.graph.values if node.graph is not None else {}
        inits = node.graph.initializers if node.graph is not None else {}
        dtypes, shapes = [], []
        for name in node.inputs:
            v = values.get(name) if name else None
            t = inits.get(name) if name else None  # an initializer's dims when its value has none (as ort_abi does)
            dtypes.append((v.dtype if v is not None else 0) or (t.dtype if t is not None else 0))
            shape = v.shape if v is not None else None
            shapes.append(tuple(shape) if shape is not None else (tuple(t.dims) if t is not None else None))
        consts = {}
        for i, name in enumerate(node.inputs):
            t = inits.get(name) if name else None
            if t is not None and t.dtype in (TensorProto.INT64, TensorProto.INT32) and (_prod(t.dims) <= 64):
                consts[i] = tuple(int(v) for v in t.numpy().reshape(-1))
        return cls(node.name, node.op_type, "" if node.domain == "ai.onnx" else node.domain, tuple(node.inputs),
                   tuple(dtypes), tuple(shapes), {k: a.value for k, a in node.attributes.items()}, tuple(node.outputs),
                   consts)

    def present_inputs(self) -> tuple[bool, ...]:
        return tuple(bool(name) for name in self.inputs)

    def present(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] != ""

    def rank(self, i: int) -> int | None:
        s = self.shapes[i] if i < len(self.shapes) else None
        return None if s is None else len(s)


Check = Callable[[NodeFacts, int], Rejection | None]


@attrs.define(frozen=True)
class OpSpec:
    op_type: str
    domain: str
    since: int
    until: int | None
    kernel: str  # source name in KERNEL_SOURCES
    recipe: str  # workspace recipe name ("none" for kernels that use none)
    check: Check
    host_inputs: tuple[int, ...] = ()  # inputs read on the host (shapes, axes, slice bounds), never copied
    host_outputs: tuple[int, ...] = ()  # outputs made in host memory (Shape's)


_INTEGERS = frozenset({TensorProto.INT64, TensorProto.INT32, TensorProto.INT16, TensorProto.INT8, TensorProto.UINT64,
                       TensorProto.UINT32, TensorProto.UINT16, TensorProto.BOOL})


def _dtypes(f: NodeFacts, want: Mapping[int, tuple[int, ...]]) -> Rejection | None:
    for i, ok in want.items():
        if not f.present(i):
            continue
        got = f.dtypes[i]
        if got == 0:
            return Rejection("dtype", f"input {i} ({f.inputs[i]!r}) has an unknown dtype", "a known input type",
                             "resolve shapes and types first (ort_graph.resolve_shapes)")
        if got not in ok:
            from ort_graph import dtype_name

            names = "/".join(dtype_name(t) for t in ok)
            integer_math = got in _INTEGERS and not set(ok) & _INTEGERS
            return Rejection("dtype", f"input {i} ({f.inputs[i]!r}) has dtype {dtype_name(got)!r}",
                             f"{names} for input {i}",
                             "integer tensors are shape arithmetic: leave this node to the CPU EP with the nodes that "
                             "read it" if integer_math else "cast before this node, or leave it to the CPU EP")
    return None


def _floats(f: NodeFacts, idx: tuple[int, ...]) -> Rejection | None:
    """The present inputs in ``idx`` share one float type: float32, float16 or bfloat16 (kernels run on one)."""
    r = _dtypes(f, {i: FLOATS for i in idx})
    if r:
        return r
    got = {f.dtypes[i] for i in idx if f.present(i)}
    if len(got) > 1:
        from ort_graph import dtype_name

        return Rejection("dtype", f"inputs {list(idx)} mix {sorted(dtype_name(t) for t in got)!r}",
                         "one float type (float32 or float16) for these inputs",
                         "insert a Cast so the types agree, or leave this node to the CPU EP")
    return None


def _ranks_known(f: NodeFacts, idx: tuple[int, ...], max_rank: int = MAX_RANK) -> Rejection | None:
    for i in idx:
        if f.present(i) and (f.rank(i) is None or f.rank(i) > max_rank):  # type: ignore[operator]
            return Rejection("shape", f"input {i} ({f.inputs[i]!r}) has shape {f.shapes[i]!r}",
                             f"a known rank of at most {max_rank}", "resolve shapes first (ort_graph.resolve_shapes)")
    return None


def _extents_fit(f: NodeFacts, idx: tuple[int, ...]) -> Rejection | None:
    """Every known extent of the present inputs in ``idx`` is one a 32-bit kernel index can hold."""
    for i in idx:
        s = f.shapes[i] if f.present(i) and i < len(f.shapes) else None
        bad = [d for d in s or () if isinstance(d, int) and not 0 <= d <= MAX_DIM]
        if bad:
            return Rejection("shape", f"input {i} ({f.inputs[i]!r}) has shape {s!r} (extent {bad[0]!r})",
                             f"extents from 0 to {MAX_DIM!r} (the kernels index with 32-bit ints)",
                             "fix the model's shape (an extent overflowed), or leave this node to the CPU EP")
    return None


def _first(*checks: Rejection | None) -> Rejection | None:
    return next((c for c in checks if c is not None), None)


def _elementwise(f: NodeFacts, opset: int) -> Rejection | None:
    n = 2 if f.op_type in BINARY_OPS else 1
    r = _first(_floats(f, tuple(range(n))), _ranks_known(f, tuple(range(n))))
    if r is None and f.op_type == "Gelu" and f.attrs.get("approximate", "none") not in ("none", "tanh", b"none", b"tanh"):
        return Rejection("attribute", f"approximate={f.attrs.get('approximate')!r}", "approximate in {'none', 'tanh'}",
                         "use the ONNX Gelu attribute values")
    return r


def _softmax(f: NodeFacts, opset: int) -> Rejection | None:
    r = _first(_floats(f, (0,)), _ranks_known(f, (0,), 64))
    if r:
        return r
    rank = f.rank(0) or 0
    axis = f.attrs.get("axis", -1 if opset >= 13 else 1)
    if rank and axis % rank != rank - 1:
        return Rejection("attribute", f"axis={axis!r} for rank {rank}", "softmax over the last axis",
                         "transpose the axis last, or leave this node to the CPU EP")
    return None


def _rms_norm(f: NodeFacts, opset: int) -> Rejection | None:
    r = _first(_floats(f, (0, 1)), _ranks_known(f, (0, 1), 64))
    if r:
        return r
    if f.present(2):
        return Rejection("input", "a bias input", "X and scale only", "leave this node to the CPU EP")
    x, scale = f.shapes[0], f.shapes[1]
    axis = f.attrs.get("axis", -1)
    if x is not None and scale is not None and len(x):
        trailing = x[axis % len(x):]
        known = all(isinstance(d, int) for d in (*trailing, *scale))
        if known and _prod(trailing) != _prod(scale):  # type: ignore[arg-type]
            return Rejection("shape", f"scale {scale!r} for normalized dims {trailing!r}",
                             "a scale with one element per normalized element", "fix the model, or use the CPU EP")
    return None


def _prod(dims) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def _skip_rms_norm(f: NodeFacts, opset: int) -> Rejection | None:
    r = _first(_floats(f, (0, 1, 2, 3)), _ranks_known(f, (0, 1), 64))
    if r:
        return r
    if f.rank(0) != f.rank(1) or (f.rank(0) or 0) < 1:
        return Rejection("shape", f"input {f.shapes[0]!r} and skip {f.shapes[1]!r}", "skip with the input's shape",
                         "leave this node to the CPU EP")
    if len(f.outputs) > 1 and f.outputs[1]:
        return Rejection("output", "the mean output (1)", "outputs 0, 2 (inv_std_var) and 3 (input_skip_bias_sum)",
                         "drop the unused mean output, or leave this node to the CPU EP")
    return None


def _matmul(f: NodeFacts, opset: int) -> Rejection | None:
    r = _first(_floats(f, (0, 1)), _ranks_known(f, (0, 1), 64))
    if r:
        return r
    a, b = f.shapes[0], f.shapes[1]
    ba, bb = tuple(a[:-2]) if len(a) > 2 else (), tuple(b[:-2]) if len(b) > 2 else ()  # type: ignore[index]
    clash = [(x, y) for x, y in zip(reversed(ba), reversed(bb))
             if isinstance(x, int) and isinstance(y, int) and x != y and 1 not in (x, y)]
    if clash:  # symbolic dims broadcast at run time (a model where they do not is invalid for every EP)
        return Rejection("shape", f"batch dims {ba!r} x {bb!r}", "batch dims that broadcast (numpy rules)",
                         "fix the model's MatMul operands")
    return None


def _gemm(f: NodeFacts, opset: int) -> Rejection | None:
    r = _first(_floats(f, (0, 1, 2)), _ranks_known(f, (0, 1, 2), 2))
    if r:
        return r
    if f.rank(0) != 2 or f.rank(1) != 2:
        return Rejection("shape", f"A {f.shapes[0]!r}, B {f.shapes[1]!r}", "2-D A and B", "fix the model's Gemm inputs")
    return None


def _matmul_nbits(f: NodeFacts, opset: int) -> Rejection | None:
    r = _first(_dtypes(f, {1: (U8,), 3: (U8,)}), _floats(f, (0, 2, 5)), _ranks_known(f, (0, 5), 64),
               _extents_fit(f, tuple(range(len(f.inputs)))))
    if r:
        return r
    bits, bs, k = f.attrs.get("bits", 4), f.attrs.get("block_size"), f.attrs.get("K")
    if bits not in (4, 8):
        return Rejection("attribute", f"bits={bits!r}", "bits=4 or bits=8",
                         "quantize to 4 or 8 bits, or leave this node to the CPU EP")
    if not isinstance(bs, int) or bs < 16 or bs & (bs - 1):
        return Rejection("attribute", f"block_size={bs!r}", "a power of two >= 16", "re-quantize with block_size 32/64/128")
    if f.present(4):
        return Rejection("input", "g_idx (act-order) input", "no g_idx", "export without act-order, or use the CPU EP")
    b_shape, n = f.shapes[1] if len(f.shapes) > 1 else None, f.attrs.get("N")
    if b_shape is not None and isinstance(k, int) and isinstance(n, int):
        want = (n, -(-k // bs), bs * bits // 8)
        if len(b_shape) != 3 or any(isinstance(d, int) and d != w for d, w in zip(b_shape, want)):
            return Rejection("shape", f"B (input 1, {f.inputs[1]!r}) shape {b_shape!r} for N={n}, K={k}, "
                             f"block_size={bs}, bits={bits}", f"B of shape {list(want)!r}", "fix the model")
    last = f.shapes[0][-1] if f.shapes[0] else None
    if not f.shapes[0] or (isinstance(last, int) and last != k):
        return Rejection("shape", f"A shape {f.shapes[0]!r} with K={k!r}", "A[..., K]", "fix the model")
    bias, n = (f.shapes[5] if f.present(5) else None), f.attrs.get("N")
    if bias is not None and (len(bias) != 1 or (isinstance(bias[0], int) and bias[0] != n)):
        return Rejection("shape", f"bias (input 5, {f.inputs[5]!r}) shape {bias!r} with N={n!r}", "a bias of shape [N]",
                         "fix the model's bias, or leave this node to the CPU EP")
    return None


def _mha(f: NodeFacts, opset: int) -> Rejection | None:
    r = _first(_floats(f, (0, 1, 2)), _ranks_known(f, (0, 1, 2), 3), _extents_fit(f, tuple(range(len(f.inputs)))))
    if r:
        return r
    extra = [i for i in range(3, len(f.inputs)) if f.present(i)]
    if extra or not (f.present(1) and f.present(2)):
        return Rejection("input", f"inputs present at positions {extra or 'key/value missing'}",
                         "query, key and value only (no bias, masks or past)", "leave this node to the CPU EP")
    if any(f.rank(i) != 3 for i in range(3)):
        return Rejection("shape", f"ranks {[f.rank(i) for i in range(3)]}", "3-D [batch, seq, hidden] query/key/value",
                         "pack heads into the last dim")
    q, k, v = f.shapes[0], f.shapes[1], f.shapes[2]
    if len({q[0], k[0], v[0]}) != 1 or k[1] != v[1]:  # type: ignore[index]
        return Rejection("shape", f"query {q!r}, key {k!r}, value {v!r}",
                         "one batch dim for all three and equal key/value lengths (same values or same symbols)",
                         "fix the model, or leave this node to the CPU EP")
    if f.attrs.get("unidirectional", 0) and f.shapes[0][1] != f.shapes[1][1]:  # type: ignore[index]
        return Rejection("attribute", f"unidirectional=1 with query length {f.shapes[0][1]!r} and key length "  # type: ignore[index]
                         f"{f.shapes[1][1]!r}", "unidirectional only when query and key lengths are the same dim",  # type: ignore[index]
                         "leave this node to the CPU EP (causal masks with a different key length are ambiguous)")
    h, hid, vhid = f.attrs.get("num_heads"), f.shapes[0][-1], f.shapes[2][-1]  # type: ignore[index]
    if not isinstance(h, int) or h <= 0 or not isinstance(hid, int) or hid % h or hid // h > 256 or vhid != hid:
        return Rejection("attribute", f"num_heads={h!r} with hidden {hid!r} (value hidden {vhid!r})",
                         "a static hidden size divisible by num_heads, head size <= 256, value hidden == query hidden",
                         "leave this node to the CPU EP")
    return None


_COMPUTE_SPECS: tuple[OpSpec, ...] = (
    *(OpSpec(op, "", 7, None, "elementwise", "none", _elementwise) for op in BINARY_OPS),
    *(OpSpec(op, "", {"Erf": 9, "Gelu": 20, "Identity": 1, "Sin": 7, "Cos": 7}.get(op, 6), None,
             "elementwise", "none", _elementwise) for op in UNARY_OPS),
    OpSpec("Softmax", "", 1, None, "softmax", "none", _softmax),
    OpSpec("SimplifiedLayerNormalization", "", 1, None, "rms_norm", "none", _rms_norm),
    OpSpec("SimplifiedLayerNormalization", "com.microsoft", 1, None, "rms_norm", "none", _rms_norm),
    OpSpec("SkipSimplifiedLayerNormalization", "com.microsoft", 1, None, "rms_norm", "none", _skip_rms_norm),
    OpSpec("MatMul", "", 1, None, "matmul", "none", _matmul),
    OpSpec("Gemm", "", 7, None, "matmul", "none", _gemm),
    OpSpec("MatMulNBits", "com.microsoft", 1, None, "matmul_nbits", "matmul_nbits", _matmul_nbits),
    OpSpec("MultiHeadAttention", "com.microsoft", 1, None, "attention", "attention", _mha),
)

from ._ops_conv import CONV_SPEC  # noqa: E402  (its checks use the helpers above)
from ._ops_gqa import GQA_SPEC  # noqa: E402
from ._ops_movement import MOVEMENT_SPECS  # noqa: E402
from ._ops_packed import PACKED_SPECS  # noqa: E402
from ._ops_where_reduce import WHERE_REDUCE_SPECS  # noqa: E402

OP_SPECS: tuple[OpSpec, ...] = (*_COMPUTE_SPECS, CONV_SPEC, GQA_SPEC, *PACKED_SPECS, *MOVEMENT_SPECS, *WHERE_REDUCE_SPECS)


def supported_ops() -> list[str]:
    return sorted({(f"{s.domain}::" if s.domain else "") + s.op_type for s in OP_SPECS})


def find_spec(op_type: str, domain: str, opset: int) -> OpSpec | None:
    domain = "" if domain == "ai.onnx" else domain
    for s in OP_SPECS:
        if s.op_type == op_type and s.domain == domain and s.since <= opset and (s.until is None or opset <= s.until):
            return s
    return None


def check_node(f: NodeFacts, opset: int) -> tuple[OpSpec | None, Rejection | None]:
    spec = find_spec(f.op_type, f.domain, opset)
    if spec is None:
        return None, Rejection("op", f"{(f.domain + '::') if f.domain else ''}{f.op_type} at opset {opset!r}",
                               ", ".join(supported_ops()), "leave this node to the CPU EP (it is next in the list)")
    return spec, spec.check(f, opset)
