"""EP contract values (003): identity, the device properties estimates read, and honest claims."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs


@attrs.frozen
class EpIdentity:
    """A stable EP name plus the device it drives: `EpIdentity('CUDAExecutionProvider', 'cuda', 0)`."""

    name: str
    device_type: str = "cpu"
    device_id: int = 0

    def __str__(self) -> str:
        return f"{self.name}({self.device_type}:{self.device_id})"


def _freeze_props(props: Mapping[str, int] | None) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((str(k), int(v)) for k, v in (props or {}).items()))


@attrs.frozen
class EpInfo:
    """The EP handle an estimate function receives: identity plus integer device properties
    (e.g. {'multi_processor_count': 132, 'total_memory': ...}). The C side reads the same values
    through `Ep_GetName/GetDeviceType/GetDeviceId/GetDeviceProperty`."""

    identity: EpIdentity
    device_properties: tuple[tuple[str, int], ...] = attrs.field(default=(), converter=_freeze_props)

    @property
    def name(self) -> str:
        return self.identity.name

    def property(self, key: str, default: int | None = None) -> int | None:
        return dict(self.device_properties).get(key, default)


def ep_info(ep: Any) -> EpInfo:
    """Normalize what callers pass as `ep`: an EpInfo, an EpIdentity, or any object with
    `.identity` (EpIdentity) and optional `.device_properties` (mapping)."""
    if isinstance(ep, EpInfo):
        return ep
    if isinstance(ep, EpIdentity):
        return EpInfo(ep)
    identity = getattr(ep, "identity", None)
    if isinstance(identity, EpIdentity):
        props = getattr(ep, "device_properties", None)
        return EpInfo(identity, dict(props) if props else None)
    raise TypeError(f"expected an EpInfo, an EpIdentity or an EP with .identity, got {ep!r}")


@attrs.frozen
class Supported:
    """The EP claims the node; `cost_bytes` is what it will cost on the device (base + workspace)."""

    cost_bytes: int

    @property
    def supported(self) -> bool:
        return True


@attrs.frozen(init=False)
class Declined:
    """The EP will not take the node, and says exactly why and what would work.

    `Declined(node, op_type, domain, opset, rejected, ep, accepts, remedy)`; `opset` may be None when
    unknown, and `op=` is accepted as an alias of `op_type=`. rejected/ep/accepts/remedy are required."""

    node: str
    op_type: str
    domain: str
    opset: int | None
    rejected: str  # the dtype / shape / attribute / layout it rejects, e.g. "input 0 dtype STRING"
    ep: str
    accepts: str  # what it accepts instead, e.g. "FLOAT, FLOAT16"
    remedy: str  # a useful next step, e.g. "cast input 0 to FLOAT or leave the node on CPU"

    def __init__(self, node: str, op_type: str | None = None, domain: str = "", opset: int | None = None,
                 rejected: str | None = None, ep: str | None = None, accepts: str | None = None,
                 remedy: str | None = None, *, op: str | None = None) -> None:
        if op is not None and op_type is not None and op != op_type:
            raise TypeError(f"Declined got op_type={op_type!r} and op={op!r}; pass one of them")
        op_type = op_type if op_type is not None else op
        missing = [n for n, v in (("rejected", rejected), ("ep", ep), ("accepts", accepts), ("remedy", remedy)) if not v]
        if op_type is None:  # '' is a node's op_type too (a malformed graph built in code): declined by name
            missing.insert(0, "op_type")
        if missing:
            raise TypeError(f"Declined for node {node!r} is missing {', '.join(missing)}; an honest decline names "
                            "the op, what was rejected, the EP, what it accepts and a remedy")
        self.__attrs_init__(node, op_type, domain, opset, rejected, ep, accepts, remedy)

    @property
    def supported(self) -> bool:
        return False

    @property
    def message(self) -> str:
        op = f"{self.domain}::{self.op_type}" if self.domain not in ("", "ai.onnx") else self.op_type
        opset = f" (opset {self.opset})" if self.opset is not None else ""
        return (f"{self.ep} declined node {self.node!r} ({op}{opset}): rejected {self.rejected}; "
                f"it accepts {self.accepts}; remedy: {self.remedy}")

    def __str__(self) -> str:
        return self.message


Capability = Supported | Declined


@runtime_checkable
class ClosableProvider(Protocol):
    """The optional shutdown hook of an execution provider: `close()` releases what the provider holds
    for its device (CUDA: loaded modules and the context; a simulated device checks that nothing is left
    allocated). A session calls it once, after it freed its own buffers and weights and released its
    kernels, and never while a run is in flight. Providers without it hold nothing to release."""

    def close(self) -> None: ...


def close_provider(ep: Any) -> None:
    """Shut an execution provider down through its optional `close()` (or `shutdown()`); no-op without one."""
    fn = getattr(ep, "close", None) or getattr(ep, "shutdown", None)
    if callable(fn):
        fn()


@runtime_checkable
class RunScopedProvider(Protocol):
    """The optional run hook of an execution provider: `run_scope()` returns a context manager the
    session holds open for the whole of each run (the CPU provider sets its intra-op threads and BLAS
    limits there, and restores them at the end, also when the run fails). Providers without it need
    nothing around a run."""

    def run_scope(self) -> contextlib.AbstractContextManager[Any]: ...


def provider_run_scope(ep: Any) -> contextlib.AbstractContextManager[Any]:
    """The context manager to hold around a run for `ep`: its `run_scope()`, else one that does nothing."""
    fn = getattr(ep, "run_scope", None)
    return fn() if callable(fn) else contextlib.nullcontext()


@attrs.frozen
class EpGraphPass:
    """One graph pass an EP contributes (003's Optimization surface): `apply(graph, claimed_nodes)` rewrites
    only among the nodes the EP claimed and returns what it did (records with `.created` node names). The
    session runs it after placement; every node it creates is placed on the EP and must be one it claims."""

    name: str
    apply: Callable[[Any, Sequence[Any]], Sequence[Any]]


@runtime_checkable
class GraphPassProvider(Protocol):
    """The optional Optimization surface: `graph_passes()` in the order they run."""

    def graph_passes(self) -> Sequence[EpGraphPass]: ...
