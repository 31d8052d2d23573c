"""Graph-free memory offset planning for activations and kernel workspace.

Give it allocation requests (id, bytes, first and last step, device, alignment); `plan` returns a
`MemoryPlan` with an offset per request and a peak per device, beside the lower bound no plan
can beat, and `validate` proves the plan correct. `plan_graph` builds the requests from an
ort_graph graph and an execution order (in-place reuse, workspace slots as negative ids);
`PatternCache`, `ExecutionBuffers` and `RedZoneGuard` are the runtime side; `bench` measures.
"""

from typing import TYPE_CHECKING

from ort_graph._lazy import lazy_exports

__version__ = "0.2.0"

_WHERE = {
    "busiest_step": "._bound",
    "lower_bound": "._bound",
    "Allocator": "._buffers",
    "ExecutionBuffers": "._buffers",
    "HostAccess": "._buffers",
    "HostAllocator": "._buffers",
    "RetainingHostAllocator": "._buffers",
    "PatternCache": "._cache",
    "ShapeKey": "._cache",
    "TraceRecorder": "._cache",
    "requests_from_trace": "._cache",
    "shape_key": "._cache",
    "BudgetExceededError": "._errors",
    "ConcurrentRunError": "._errors",
    "ConstInputWritten": "._errors",
    "HostMemoryError": "._errors",
    "InvalidRequestError": "._errors",
    "LookupMissError": "._errors",
    "MemPlanError": "._errors",
    "MisalignedError": "._errors",
    "OverlapError": "._errors",
    "PlanValidationError": "._errors",
    "RedZoneViolation": "._errors",
    "SizeOverflowError": "._errors",
    "TraceError": "._errors",
    "Activations": "._graph",
    "activation_lifetimes": "._graph",
    "may_inplace": "._graph",
    "inplace_candidates": "._graph",
    "OnlinePlanner": "._online",
    "ALGORITHMS": "._planners",
    "plan": "._planners",
    "RedZoneGuard": "._redzone",
    "DEFAULT_ALIGNMENT": "._types",
    "MAX_BYTES": "._types",
    "AllocationRequest": "._types",
    "MemoryPlan": "._types",
    "align_up": "._types",
    "buffer_margin": "._types",
    "validate": "._validate",
    "GraphPlan": "._workspace",
    "SlotKey": "._workspace",
    "plan_graph": "._workspace",
    "workspace_requests": "._workspace",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)

__all__ = [
    "ALGORITHMS", "DEFAULT_ALIGNMENT", "MAX_BYTES", "Activations", "AllocationRequest", "Allocator", "BudgetExceededError",
    "ConcurrentRunError", "ConstInputWritten", "HostMemoryError", "ExecutionBuffers", "GraphPlan", "HostAccess", "HostAllocator", "InvalidRequestError", "RetainingHostAllocator",
    "LookupMissError", "MemPlanError", "MemoryPlan", "MisalignedError", "OnlinePlanner", "OverlapError",
    "PatternCache", "PlanValidationError", "RedZoneGuard", "RedZoneViolation", "ShapeKey", "SizeOverflowError", "SlotKey",
    "TraceError", "TraceRecorder", "__version__", "activation_lifetimes", "align_up", "buffer_margin", "busiest_step",
    "lower_bound", "may_inplace", "inplace_candidates", "plan", "plan_graph", "requests_from_trace", "shape_key", "validate",
    "workspace_requests",
]


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from ._bound import busiest_step, lower_bound  # noqa: F401
    from ._buffers import Allocator, ExecutionBuffers, HostAccess, HostAllocator, RetainingHostAllocator  # noqa: F401
    from ._cache import PatternCache, ShapeKey, TraceRecorder, requests_from_trace, shape_key  # noqa: F401
    from ._errors import (  # noqa: F401
        BudgetExceededError,
        ConcurrentRunError,
        ConstInputWritten,
        HostMemoryError,
        InvalidRequestError,
        LookupMissError,
        MemPlanError,
        MisalignedError,
        OverlapError,
        PlanValidationError,
        RedZoneViolation,
        SizeOverflowError,
        TraceError,
    )
    from ._graph import Activations, activation_lifetimes, inplace_candidates, may_inplace  # noqa: F401
    from ._online import OnlinePlanner  # noqa: F401
    from ._planners import ALGORITHMS, plan  # noqa: F401
    from ._redzone import RedZoneGuard  # noqa: F401
    from ._types import DEFAULT_ALIGNMENT, MAX_BYTES, AllocationRequest, MemoryPlan, align_up, buffer_margin  # noqa: F401
    from ._validate import validate  # noqa: F401
    from ._workspace import GraphPlan, SlotKey, plan_graph, workspace_requests  # noqa: F401
