"""One workspace recipe per kernel, shared by the Level-1 estimate, the Level-2 declaration and the
runtime request. Recipes see positional input shapes (None = omitted or shapeless), the inputs'
ONNX element types (0 = unknown), the node's attributes and the device profile; they return bytes,
or None when the shapes are malformed, overflow, or are not known well enough (never a guess).

A known-zero extent that empties the output (``[0, unknown, K]`` for MatMulNBits' A, a zero batch or
query length for the attentions) sizes the workspace at 0 even when other extents are unknown: the
kernel does not run, so no shape of the unknown extents needs any (``known_empty``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ort_partition import DeviceProfile

from ._attention_recipe import attention_recipe, attention_workspace_envelope
from ._checked import dim, mul, span
from ._conv_recipe import conv_workspace_bytes
from ._gqa_recipe import gqa_head_size, gqa_recipe, gqa_workspace_envelope
from ._nbits_recipe import matmul_nbits_recipe, matmul_nbits_workspace_envelope
from ._packed_recipe import packed_attention_dims, packed_attention_recipe, packed_mha_dims, packed_mha_recipe

__all__ = ["SLOT_ID", "InputShapes", "Ranges", "WorkspaceRecipe", "RECIPES", "zero_recipe", "recipe_for",
           "launchable", "known_empty", "workspace_bytes", "estimate_bytes"]

SLOT_ID = 0  # every kernel here declares at most one slot
InputShapes = Sequence[tuple[int, ...] | None]
# Ranges: per input, per dim, an inclusive (lo, hi) span (static dims give (d, d)).
Ranges = Sequence[tuple[tuple[int, int], ...] | None]

Dtypes = Sequence[int]
Exact = Callable[[InputShapes, Dtypes, Mapping[str, Any], DeviceProfile], int | None]
Envelope = Callable[[Ranges, Dtypes, Mapping[str, Any], DeviceProfile], int | None]
Partial = Sequence[tuple[object, ...] | None]  # extents may be symbols or None (unknown)
Empty = Callable[[Partial, Mapping[str, Any]], bool]
_ITEMSIZE = {1: 4, 10: 2, 16: 2}  # onnx FLOAT, FLOAT16, BFLOAT16


def _itemsize(dtypes: Dtypes, i: int) -> int | None:
    return _ITEMSIZE.get(dtypes[i]) if i < len(dtypes) else None


def _zero(d: object) -> bool:
    return isinstance(d, int) and not isinstance(d, bool) and d == 0


def _never_empty(shapes: Partial, attrs: Mapping[str, Any]) -> bool:
    return False


class WorkspaceRecipe:
    """``exact`` for one static shape; ``envelope`` for the largest need over ranges of shapes;
    ``empty`` says a partially known signature has an empty output (the kernel does not run)."""

    def __init__(self, name: str, exact: Exact, envelope: Envelope, empty: Empty = _never_empty) -> None:
        self.name, self.exact, self.envelope, self.empty = name, exact, envelope, empty

    def __repr__(self) -> str:
        return f"WorkspaceRecipe({self.name!r})"


def _static(shapes: InputShapes, i: int, rank: int | None = None) -> tuple[int, ...] | None:
    if i >= len(shapes) or shapes[i] is None:
        return None
    s = tuple(shapes[i])  # type: ignore[arg-type]
    if rank is not None and len(s) != rank:
        return None
    return s if all(dim(d) is not None for d in s) else None


def _zero_exact(shapes: InputShapes, dtypes: Dtypes, attrs: Mapping[str, Any], device: DeviceProfile) -> int | None:
    return 0


def _zero_envelope(ranges: Ranges, dtypes: Dtypes, attrs: Mapping[str, Any], device: DeviceProfile) -> int | None:
    return 0


zero_recipe = WorkspaceRecipe("none", _zero_exact, _zero_envelope)


# -- attention (com.microsoft MultiHeadAttention, 3-D query/key/value) --------------------------
def _heads(attrs: Mapping[str, Any], hidden: int) -> tuple[int, int] | None:
    h = dim(attrs.get("num_heads"))
    if not h or hidden % h:
        return None
    return h, hidden // h


def _attention_exact(shapes: InputShapes, dtypes: Dtypes, attrs: Mapping[str, Any], device: DeviceProfile) -> int | None:
    # the LSEs and split partial outputs are float32 whatever the input type
    q, k = _static(shapes, 0, 3), _static(shapes, 1, 3)
    if q is None or k is None or q[0] != k[0]:
        return None
    hd = _heads(attrs, q[2])
    if hd is None:
        return None
    r = attention_recipe(q[0], q[1], k[1], hd[0], hd[1], device.sm_count)
    return None if r is None else r.total_bytes


def _attention_envelope(ranges: Ranges, dtypes: Dtypes, attrs: Mapping[str, Any], device: DeviceProfile) -> int | None:
    if len(ranges) < 2 or ranges[0] is None or ranges[1] is None or len(ranges[0]) != 3 or len(ranges[1]) != 3:
        return None
    (b, sq, hid), (_, skv, _) = ranges[0], ranges[1]
    if hid[0] != hid[1]:
        return None  # the hidden size must be known to split it into heads
    hd = _heads(attrs, hid[0])
    if hd is None:
        return None
    return attention_workspace_envelope(b, sq, skv, hd[0], hd[1], device.sm_count)


def _query_empty(shapes: Partial, attrs: Mapping[str, Any]) -> bool:
    """A 3-D query [B, S, hidden] with B or S known to be 0: no output rows."""
    q = shapes[0] if shapes else None
    return q is not None and len(q) == 3 and (_zero(q[0]) or _zero(q[1]))


attention_recipe_ws = WorkspaceRecipe("attention", _attention_exact, _attention_envelope, _query_empty)


# -- MatMulNBits --------------------------------------------------------------------------------
def _nbits_exact(shapes: InputShapes, dtypes: Dtypes, attrs: Mapping[str, Any], device: DeviceProfile) -> int | None:
    a = _static(shapes, 0)
    if a is None or len(a) < 1 or a[-1] != attrs.get("K"):
        return None
    r = matmul_nbits_recipe(mul(*a[:-1]), attrs.get("N"), attrs.get("K"), attrs.get("bits", 4), attrs.get("block_size"),
                            _itemsize(dtypes, 0))
    return None if r is None else r.workspace_bytes


def _nbits_envelope(ranges: Ranges, dtypes: Dtypes, attrs: Mapping[str, Any], device: DeviceProfile) -> int | None:
    if not ranges or ranges[0] is None or len(ranges[0]) < 1:
        return None
    a = ranges[0]
    if a[-1] != (attrs.get("K"), attrs.get("K")):
        return None
    lo, hi = mul(*(r[0] for r in a[:-1])), mul(*(r[1] for r in a[:-1]))
    if lo is None or hi is None or span((lo, hi)) is None:
        return None
    return matmul_nbits_workspace_envelope((lo, hi), attrs.get("N"), attrs.get("K"), attrs.get("bits", 4),
                                           attrs.get("block_size"), _itemsize(dtypes, 0))


def _nbits_empty(shapes: Partial, attrs: Mapping[str, Any]) -> bool:
    """M = prod(A[:-1]) known to be 0 (A's last extent K or unknown), or N == 0."""
    a = shapes[0] if shapes else None
    if a is None or len(a) < 1 or (isinstance(a[-1], int) and a[-1] != attrs.get("K")):
        return False
    return _zero(attrs.get("N")) or any(_zero(d) for d in a[:-1])


matmul_nbits_recipe_ws = WorkspaceRecipe("matmul_nbits", _nbits_exact, _nbits_envelope, _nbits_empty)



# -- GroupQueryAttention (com.microsoft, 3-D query, packed or separate q/k/v, BNSH past) ---------
def _gqa_head(attrs: Mapping[str, Any], hidden: int, shapes_or_ranges: Sequence[object]) -> tuple[int, int] | None:
    """(num_heads, head size); key omitted (None at position 1) means packed QKV."""
    packed = len(shapes_or_ranges) < 2 or shapes_or_ranges[1] is None
    d = gqa_head_size(hidden, attrs.get("num_heads"), attrs.get("kv_num_heads"), packed)
    return None if d is None else (attrs["num_heads"], d)


def _gqa_exact(shapes: InputShapes, dtypes: Dtypes, attrs: Mapping[str, Any], device: DeviceProfile) -> int | None:
    # flash-decoding buffers for P + S keys (see _gqa_recipe); float32 whatever the input type
    q = _static(shapes, 0, 3)
    if q is None:
        return None
    hd = _gqa_head(attrs, q[2], shapes)
    if hd is None:
        return None
    past = 0
    if len(shapes) > 3 and shapes[3] is not None:
        pk = _static(shapes, 3, 4)
        if pk is None:
            return None
        past = pk[2]
    r = gqa_recipe(q[0], q[1], past, hd[0], hd[1], device.sm_count, attrs.get("kv_num_heads"))
    return None if r is None else r.total_bytes


def _gqa_envelope(ranges: Ranges, dtypes: Dtypes, attrs: Mapping[str, Any], device: DeviceProfile) -> int | None:
    if not ranges or ranges[0] is None or len(ranges[0]) != 3:
        return None
    b, s, hid = ranges[0]
    if hid[0] != hid[1]:
        return None  # the hidden size must be known to split it into heads
    hd = _gqa_head(attrs, hid[0], ranges)
    if hd is None:
        return None
    past: tuple[int, int] = (0, 0)
    if len(ranges) > 3 and ranges[3] is not None:
        if len(ranges[3]) != 4:
            return None
        past = ranges[3][2]
    return gqa_workspace_envelope(b, s, past, hd[0], hd[1], device.sm_count, attrs.get("kv_num_heads"))


gqa_recipe_ws = WorkspaceRecipe("gqa", _gqa_exact, _gqa_envelope, _query_empty)


# -- Conv (implicit GEMM: 0 bytes for every geometry it runs; see _conv_recipe) -------------------
def _conv_exact(shapes: InputShapes, dtypes: Dtypes, attrs: Mapping[str, Any], device: DeviceProfile) -> int | None:
    x, w = _static(shapes, 0), _static(shapes, 1)
    return None if x is None or w is None else conv_workspace_bytes(x, w, attrs)


def _highest(ranges: Ranges) -> list[tuple[int, ...] | None]:
    return [None if r is None else tuple(hi for _lo, hi in r) for r in ranges]


def _conv_envelope(ranges: Ranges, dtypes: Dtypes, attrs: Mapping[str, Any], device: DeviceProfile) -> int | None:
    # 0 whatever the shape; the largest shapes must still be a geometry the kernel runs
    return _conv_exact(_highest(ranges), dtypes, attrs, device)


conv_recipe_ws = WorkspaceRecipe("conv", _conv_exact, _conv_envelope)


# -- PackedAttention / PackedMultiHeadAttention (com.microsoft; see _packed_recipe) -----------------
def _zero_hint(shapes: InputShapes) -> bool:
    """The seeds' rule: a zero extent in a shape hint is unavailable (the hint carries no max-shape
    provenance), not 0 bytes; the graph-free recipes size an exact zero at run time."""
    return any(s is not None and any(d == 0 for d in s) for s in shapes)


def _packed_attention_exact(shapes: InputShapes, dtypes: Dtypes, attrs: Mapping[str, Any],
                            device: DeviceProfile) -> int | None:
    if _zero_hint(shapes):
        return None
    g = packed_attention_dims(shapes, attrs)
    r = None if g is None else packed_attention_recipe(g.token_count, g.hidden, g.v_hidden, attrs.get("num_heads"),
                                                       _itemsize(dtypes, 0))
    return None if r is None else r.total_bytes


def _packed_mha_exact(shapes: InputShapes, dtypes: Dtypes, attrs: Mapping[str, Any], device: DeviceProfile) -> int | None:
    if _zero_hint(shapes):
        return None
    g = packed_mha_dims(shapes, attrs)
    r = None if g is None else packed_mha_recipe(g.token_count, g.hidden, g.v_hidden, attrs.get("num_heads"))
    return None if r is None else r.total_bytes


def _monotonic_envelope(exact: Exact) -> Envelope:
    """Both packed roots grow with every extent: the need at the largest shapes bounds every shape's."""
    def envelope(ranges: Ranges, dtypes: Dtypes, attrs: Mapping[str, Any], device: DeviceProfile) -> int | None:
        return exact(_highest(ranges), dtypes, attrs, device)

    return envelope


packed_attention_recipe_ws = WorkspaceRecipe("packed_attention", _packed_attention_exact,
                                             _monotonic_envelope(_packed_attention_exact))
packed_mha_recipe_ws = WorkspaceRecipe("packed_mha", _packed_mha_exact, _monotonic_envelope(_packed_mha_exact))

RECIPES: dict[str, WorkspaceRecipe] = {"none": zero_recipe, "attention": attention_recipe_ws,
                                       "matmul_nbits": matmul_nbits_recipe_ws, "gqa": gqa_recipe_ws,
                                       "conv": conv_recipe_ws, "packed_attention": packed_attention_recipe_ws,
                                       "packed_mha": packed_mha_recipe_ws}


def recipe_for(kernel: str) -> WorkspaceRecipe:
    return RECIPES.get(kernel, zero_recipe)


def launchable(shapes: Sequence[tuple[object, ...] | None], present: Sequence[bool] | None = None) -> bool:
    """Whether every present input has a known rank and no extent a kernel cannot index.

    A kernel reads every input it is given, not only those its recipe sizes from (attention walks
    value with key's layout, MatMulNBits adds an [N] bias), and its launch indexes each with 32-bit
    ints; so an input of unknown rank, or an extent < 0 or > 2**31-1, leaves the recipe unavailable
    (None) at Level 1, at Level 2 and for claims alike. Symbolic and unknown (None) extents pass here.
    ``present[i]`` says input i is given (where ``shapes[i]`` None may mean either); without it None
    is omitted.
    """
    for i, s in enumerate(shapes):
        if s is None:
            if present is not None and i < len(present) and present[i]:
                return False
            continue
        if any(d is not None and not isinstance(d, str) and dim(d) is None for d in s):
            return False
    return True


def known_empty(kernel: str, shapes: Partial, attrs: Mapping[str, Any], present: Sequence[bool] | None = None) -> bool:
    """Whether the node's output is known to be empty from partial shapes (extents: ints, symbols or
    None), every present input being ``launchable``: its workspace is then 0 bytes, not unknown."""
    return launchable(shapes, present) and recipe_for(kernel).empty(shapes, attrs)


def workspace_bytes(kernel: str, shapes: InputShapes, dtypes: Dtypes, attrs: Mapping[str, Any],
                    device: DeviceProfile) -> int | None:
    """Exact bytes for static shapes (Level 2 and the runtime request); None (shapes None are
    omitted inputs) when any present extent is not an index a kernel can use."""
    recipe = recipe_for(kernel)
    if recipe is zero_recipe:
        return 0
    if not all(s is None or all(dim(d) is not None for d in s) for s in shapes):
        return None
    return recipe.exact(shapes, dtypes, attrs, device)


def estimate_bytes(kernel: str, shapes: Sequence[tuple[object, ...] | None], dtypes: Dtypes, attrs: Mapping[str, Any],
                   device: DeviceProfile, dim_ranges: Mapping[str, tuple[int, int]] | None = None,
                   present: Sequence[bool] | None = None) -> int | None:
    """Level-1 estimate from graph shapes: exact when static, the envelope when symbolic dims have
    ranges in ``dim_ranges`` (name -> inclusive (lo, hi)); None when a needed dim is unknown, or
    when a present input (``present``: per input, given or omitted) is not ``launchable``."""
    recipe = recipe_for(kernel)
    if recipe is zero_recipe:
        return 0
    if not launchable(shapes, present):
        return None
    if recipe.empty(shapes, attrs):
        return 0
    if all(s is None or all(dim(d) is not None for d in s) for s in shapes):
        return recipe.exact([None if s is None else tuple(s) for s in shapes], dtypes, attrs, device)  # type: ignore[misc]
    ranges: list[tuple[tuple[int, int], ...] | None] = []
    for s in shapes:
        if s is None:
            ranges.append(None)
            continue
        row = []
        for d in s:
            r = span(d) if dim(d) is not None else (span((dim_ranges or {}).get(d)) if isinstance(d, str) and dim_ranges and d in dim_ranges else None)  # type: ignore[arg-type]
            if r is None:
                return None
            row.append(r)
        ranges.append(tuple(row))
    return recipe.envelope(ranges, dtypes, attrs, device)
