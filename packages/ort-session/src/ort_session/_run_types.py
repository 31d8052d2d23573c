"""What the executor runs against: `RunStats` (what one run did), the `Kernel` and `Layout` protocols (where
outputs and workspace live: planned offsets, a traced pattern, or fresh arrays) and the plan-less `FreshArrays`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import attrs
import numpy as np

import ort_abi
from ort_graph import Node

__all__ = ["FreshArrays", "Kernel", "Layout", "LayoutBase", "RunStats", "readable_in_place"]


@attrs.define
class RunStats:
    """What one run did with memory. `allocations` counts the runtime's own allocation calls: device
    buffers allocated for the run, outputs not placed in a planned block, scratch fallbacks. Numpy
    temporaries inside a CPU kernel are not counted there: `copied_outputs` / `copied_bytes` count the
    results kernels computed outside the block they were given (and the executor then copied in), and
    `traced_bytes` (only when measuring, else None) is the peak of numpy data buffers allocated during the
    node loop beyond what existed before it: kernels' fresh results and temporaries, to hold against the
    plan; `traced_by` names the measure (`_traced`: the counting numpy allocator, exact, or tracemalloc's
    numpy domain at node boundaries, a lower bound), `traced_nodes` the bytes each node's kernel held above
    what was live when it started (nodes that held none left out), and `traced_python_bytes` tracemalloc's
    peak of all host allocations (Python objects too) where tracemalloc traced the run, else None."""

    allocations: int = 0
    workspace_from_plan: int = 0
    scratch_fallbacks: int = 0
    scratch_bytes: int = 0
    nodes_run: int = 0
    c_steps: int = 0  # of nodes_run, the C kernels' steps computed through the C step runner (`_fast_steps`)
    planned_values: int = 0
    layout: str = ""
    graph: str = ""  # device graph capture: "captured" (this run recorded it), "replayed", or "" (none)
    streamed_copies: int = 0  # host-to-device copies of streamed weights (weight streaming)
    streamed_bytes: int = 0
    # the simulated GPU's device time for the run's decoder layers (copies on their stream overlapping the
    # layers' modelled compute): {"seconds", "serial_seconds", "busy", "overlap_seconds"}; None elsewhere
    streaming_timeline: dict[str, Any] | None = None
    copied_outputs: int = 0
    copied_bytes: int = 0
    traced_bytes: int | None = None
    traced_by: str | None = None
    traced_nodes: dict[str, int] = attrs.field(factory=dict)
    traced_python_bytes: int | None = None
    # tensor copies between host and device memory made by the run (boundary copies, device values a host
    # node had to read, device outputs handed back): a device-bound input or output makes none
    host_to_device_copies: int = 0
    host_to_device_bytes: int = 0
    device_to_host_copies: int = 0
    device_to_host_bytes: int = 0
    device_to_device_copies: int = 0
    device_to_device_bytes: int = 0

    def count_copy(self, src: Any, dst: Any) -> None:
        """Count one tensor copy from `src` to `dst` by where each lives (host-to-host copies are not counted)."""
        on_device = isinstance(src, ort_abi.DeviceTensor), isinstance(dst, ort_abi.DeviceTensor)
        kind = {(False, True): "host_to_device", (True, False): "device_to_host",
                (True, True): "device_to_device"}.get(on_device)
        if kind is not None:
            setattr(self, f"{kind}_copies", getattr(self, f"{kind}_copies") + 1)
            setattr(self, f"{kind}_bytes", getattr(self, f"{kind}_bytes") + int(dst.nbytes))


class Kernel(Protocol):
    """Any kernel language through ort-abi: compute(ctx) reads ctx inputs and fills ctx outputs."""

    def compute(self, ctx: ort_abi.KernelContext) -> None: ...


class Layout(Protocol):
    """Where a run's values and workspace live."""

    name: str
    strict: bool  # pre-allocated: any allocation outside the plan is an error at the node

    def hold(self, stats: RunStats) -> contextlib.AbstractContextManager[Any]: ...

    def place(self, name: str, arr: Any, *, copy: bool = True) -> Any | None:
        """A graph input as the run reads it: copied into its planned block (`copy`, or where kernels cannot
        read it in place, `readable_in_place`); None: `arr` itself, the caller's array."""

    def allocate(self, step: int, name: str, shape: tuple[int, ...], dtype: np.dtype) -> Any | None:
        """The planned block of output `name` viewed as (shape, dtype) (a DeviceTensor on a device with
        its own memory), or None: allocate it fresh."""

    def release(self, step: int, name: str) -> None: ...

    def workspace(self, node: Node, args: Sequence[Any] = ()) -> dict[int, Any]:
        """Planned workspace slots of this node (`args`: its inputs this run): slot id -> uint8 buffer
        (a DeviceBuffer on a device)."""

    def before_step(self, step: int, node: Node | None = None, args: Sequence[Any] = ()) -> None:
        """Before `node`'s kernel runs (`args`: what it reads, in `node.inputs` + implicit order)."""

    def after_step(self, step: int, node: Node) -> None: ...


class LayoutBase:
    """Defaults for a Layout: nothing planned, no guards. Subclasses override what they plan."""

    name = "unplanned"
    strict = False
    guarded = False  # red zones watch every step: feeds and weights are private copies, inputs are checksummed

    @contextlib.contextmanager
    def hold(self, stats: RunStats) -> Iterator[None]:
        yield

    def place(self, name: str, arr: Any, *, copy: bool = True) -> Any | None:
        return None

    def allocate(self, step: int, name: str, shape: tuple[int, ...], dtype: np.dtype) -> Any | None:
        return None

    def release(self, step: int, name: str) -> None:
        return None

    def workspace(self, node: Node, args: Sequence[Any] = ()) -> dict[int, Any]:
        return {}

    def before_step(self, step: int, node: Node | None = None, args: Sequence[Any] = ()) -> None:
        return None

    def after_step(self, step: int, node: Node) -> None:
        return None


class FreshArrays(LayoutBase):
    """No plan: every output is its own allocation (and counted as one)."""


def readable_in_place(arr: Any) -> bool:
    """A feed kernels can read where the caller holds it: a C-contiguous numpy array of numbers (not copied into
    its planned block, which the plan keeps and the run leaves unused; kernels do not write their inputs: the C
    ones get them read-only, and a read-only numpy array would make numpy copy it, e.g. `take`'s indices)."""
    return type(arr) is np.ndarray and arr.flags.c_contiguous and arr.dtype.kind != "O"

