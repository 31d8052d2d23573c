"""The CPU op table: one `OpImpl` per (domain, op_type, opset range).

Each op module registers its implementations with `@register(...)`. The CPU execution provider wraps
every OpImpl as a Python kernel in the ort-abi registry, so the op code itself stays plain numpy:

    @register("Relu", since=6)
    class Relu(OpImpl):
        def compute(self, node, inputs):
            return [np.maximum(inputs[0], 0)]

Claims are honest: `supports()` returns None when this implementation handles the node's dtypes,
shapes and attributes, or a `Decline` that says what was rejected, what is accepted and a remedy.
A claimed node must not fail at run time for an ordinary dtype/shape/attribute reason.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import pathlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from ort_graph import Node

_PKG_DIR = pathlib.Path(__file__).parent


@attrs.frozen
class Decline:
    """Why the CPU EP will not take a node: what was rejected, what it accepts, how to fix it."""

    rejected: str  # e.g. "input 0 dtype STRING", "attribute mode='cubic'"
    accepts: str  # e.g. "float32, float64, int32, int64"
    remedy: str = "cast the input to a supported type or run this node on another execution provider"


@attrs.frozen
class InputInfo:
    """What is known about one input when claiming: onnx elem type (0 unknown) and shape (None unknown)."""

    dtype: int
    shape: tuple[int | str | None, ...] | None
    present: bool = True  # False for an omitted optional input ('')


class OpImpl:
    """Base class of CPU op implementations. Subclasses override `compute`, optionally the rest."""

    op_type: ClassVar[str] = ""
    domain: ClassVar[str] = ""
    since: ClassVar[int] = 1
    until: ClassVar[int | None] = None  # last opset this implementation covers (inclusive)
    # ONNX elem types accepted on input 0 (None: any numeric type numpy handles)
    dtypes: ClassVar[frozenset[int] | None] = None
    # True for ops with subgraphs: compute() then receives the explicit inputs followed by the
    # values of node.implicit_inputs() (outer-scope names the subgraphs read), in that order.
    implicit_inputs: ClassVar[bool] = False
    # True when `compute` writes its outputs into the blocks `self.output(...)` hands it (the session's
    # planned blocks) instead of returning fresh arrays the session then copies; `ortrun kernels` shows it
    writes_output: ClassVar[bool] = False

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        """None when this implementation will run the node correctly; else a Decline."""
        if self.dtypes is not None and inputs and inputs[0].present and inputs[0].dtype:
            if inputs[0].dtype not in self.dtypes:
                from ort_graph import dtype_name

                return Decline(
                    rejected=f"input 0 dtype {dtype_name(inputs[0].dtype)}",
                    accepts=", ".join(sorted(dtype_name(d) for d in self.dtypes)),
                )
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        """Run the op on numpy inputs (None for omitted optional inputs); one array per output."""
        raise NotImplementedError(f"{type(self).__name__} does not implement compute")

    def bind(self, node: Node, opset: int) -> BoundCompute:
        """`compute` for this one node at `opset` (the model's import of the node's domain), as the
        provider's kernel calls it on every run: an op overrides it to work out once what depends only on the
        node (attributes, opset) instead of on every call. The result must equal `compute(node, inputs)` for
        every input, errors included: what cannot be worked out without the inputs (or could raise) stays in
        the returned function."""
        return functools.partial(self.compute, node)

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        """Scratch this op needs beyond its outputs as (slot_id, bytes); [] for none.

        The same function serves the Level-1 estimate (max shapes) and the Level-2 declaration
        (resolved shapes); `compute` may then ask `self.scratch(slot_id, nbytes)` for it."""
        return []


    def scratch(self, slot_id: int, nbytes: int) -> np.ndarray | None:
        """Workspace for the node being computed: the session's planned slot when one was declared
        large enough, else a counted scratch allocation; None outside a session run."""
        provider = _WORKSPACE.get()
        return None if provider is None else provider(slot_id, nbytes)

    def output(self, index: int, shape: Sequence[int], dtype: Any) -> np.ndarray:
        """The array output `index` is computed into: in a session run the planned block of the output
        (`KernelContext.output`), so a kernel that fills it and returns it costs no copy; outside a
        run a fresh array."""
        provider = _OUTPUT.get()
        return np.empty(tuple(shape), dtype) if provider is None else provider(index, tuple(shape), np.dtype(dtype))

    def workspace(self, slot_id: int, shape: Sequence[int], dtype: Any) -> np.ndarray:
        """`scratch(slot_id, ...)` viewed as a C-contiguous array of `shape` and `dtype` (a fresh array
        outside a session run). The slot must be declared by `workspace_bytes` to be planned."""
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        buf = self.scratch(slot_id, workspace_nbytes(shape, dt))
        if buf is None:
            return np.empty(tuple(shape), dt)
        skip = (-buf.__array_interface__["data"][0]) % dt.alignment
        return buf[skip: skip + count * dt.itemsize].view(dt).reshape(tuple(shape))


def workspace_nbytes(shape: Sequence[int], dtype: Any) -> int:
    """The bytes to declare for a workspace array of `shape` and `dtype` (`OpImpl.workspace`): its size
    plus room to align it."""
    dt = np.dtype(dtype)
    return int(np.prod(shape, dtype=np.int64)) * dt.itemsize + dt.alignment


BoundCompute = Callable[[list[Any]], list[Any]]  # `OpImpl.bind`: inputs -> outputs of one node
OutputProvider = Callable[[int, tuple[int, ...], np.dtype], np.ndarray]
_OUTPUT: contextvars.ContextVar[OutputProvider | None] = contextvars.ContextVar("ort_cpu_output", default=None)

WorkspaceProvider = Callable[[int, int], "np.ndarray | None"]
_WORKSPACE: contextvars.ContextVar[WorkspaceProvider | None] = contextvars.ContextVar("ort_cpu_workspace", default=None)


@contextlib.contextmanager
def workspace_scope(provider: WorkspaceProvider) -> Iterator[None]:
    """Make `provider(slot_id, nbytes)` answer `OpImpl.scratch` calls while a kernel computes."""
    token = _WORKSPACE.set(provider)
    try:
        yield
    finally:
        _WORKSPACE.reset(token)


_TABLE: dict[tuple[str, str], list[OpImpl]] = {}  # (domain, op_type) -> impls, in the order `load_all_ops` registers them
# id(impl) -> (rank of the module that registered it in that order, registration count, that module's name)
_ORDER: dict[int, tuple[int, int, str]] = {}
# Op modules of other op families (com.microsoft): a failure to import one is recorded here (module -> repr of the
# error) and warned about rather than breaking the standard-domain op library
LOAD_ERRORS: dict[str, str] = {}
_LOADED_ALL = False
_LOADED_OPS: set[tuple[str, str]] = set()  # (domain, op_type) whose modules `load_op` imported: found once per op


def register(op_type: str, *, since: int = 1, until: int | None = None, domain: str = "") -> Callable[[type[OpImpl]], type[OpImpl]]:
    """Class decorator adding an OpImpl for `domain::op_type` over opsets [since, until]."""

    def deco(cls: type[OpImpl]) -> type[OpImpl]:
        cls.op_type, cls.domain, cls.since, cls.until = op_type, domain, since, until
        impl = cls()
        module = sys._getframe(1).f_globals.get("__name__", "")  # the module whose code registers it
        _ORDER[id(impl)] = (_module_rank(module), len(_ORDER), module)
        impls = _TABLE.setdefault((domain, op_type), [])
        impls.append(impl)
        impls.sort(key=lambda i: _ORDER[id(i)])  # as `load_all_ops` would have ordered them, whatever loaded first
        return cls

    return deco


@functools.cache
def op_modules() -> tuple[str, ...]:
    """The op modules of this package in the order `load_all_ops` imports them: `ops_*`, then `contrib` and
    `ops_extra_*` (each group sorted by name)."""
    names = sorted(f.name[:-3] for f in os.scandir(_PKG_DIR) if f.name.endswith(".py") and f.is_file())
    return (tuple(n for n in names if n.startswith("ops_") and not n.startswith("ops_extra_"))
            + tuple(n for n in names if n.startswith("ops_extra_") or n == "contrib"))


def _module_rank(module: str) -> int:
    """A module's place in `op_modules()`; modules outside the package register after all of them."""
    prefix, _, name = module.rpartition(".")
    mods = op_modules()
    return mods.index(name) if prefix == __package__ and name in mods else len(mods)


def _import_op_module(name: str) -> None:
    """Import one op module (registering its OpImpls); an other-family module that fails lands in LOAD_ERRORS."""
    import importlib
    import warnings

    if name in LOAD_ERRORS:
        return
    if not (name.startswith("ops_extra_") or name == "contrib"):
        importlib.import_module(f"{__package__}.{name}")
        return
    try:
        importlib.import_module(f"{__package__}.{name}")
    except Exception as e:  # noqa: BLE001 - keep the standard ops usable
        LOAD_ERRORS[name] = repr(e)
        warnings.warn(f"ort_cpu_ep.ops: op module {name!r} failed to import: {e!r}", stacklevel=3)


def load_all_ops() -> None:
    """Import every op module of this package (idempotent); each registers its OpImpl classes."""
    global _LOADED_ALL
    for name in op_modules():
        _import_op_module(name)
    _LOADED_ALL = True


def load_op(op_type: str, domain: str) -> None:
    """Import the op modules that register `domain::op_type` (`_op_index.MODULES`, generated from what
    `load_all_ops` registers; a test keeps them equal); an op the index does not know loads every module."""
    if _LOADED_ALL or (domain, op_type) in _LOADED_OPS:
        return
    from ._op_index import MODULES

    mods = MODULES.get((domain, op_type))
    if mods is None:
        load_all_ops()
        return
    for name in mods:
        _import_op_module(name)
    _LOADED_OPS.add((domain, op_type))


def find(op_type: str, domain: str, opset: int) -> OpImpl | None:
    """The implementation covering `opset`, preferring the newest `since` and, between equal ones,
    the one registered last (as the session's kernel registry resolves them); None when none does."""
    domain = "" if domain == "ai.onnx" else domain
    load_op(op_type, domain)
    best: OpImpl | None = None
    for impl in _TABLE.get((domain, op_type), ()):
        if impl.since <= opset and (impl.until is None or opset <= impl.until):
            if best is None or impl.since >= best.since:
                best = impl
    return best


def op_impls(op_type: str, domain: str) -> list[OpImpl]:
    """Every OpImpl of `domain::op_type` (loading the modules that register it), in registration order."""
    domain = "" if domain == "ai.onnx" else domain
    load_op(op_type, domain)
    return list(_TABLE.get((domain, op_type), ()))


def registered_by(impl: OpImpl) -> str:
    """The name of the module whose code registered `impl`."""
    return _ORDER[id(impl)][2]


def all_ops() -> list[OpImpl]:
    load_all_ops()
    return [impl for impls in _TABLE.values() for impl in impls]


def attrs_of(node: Node) -> dict[str, Any]:
    return {name: a.value for name, a in node.attributes.items()}
