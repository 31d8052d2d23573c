"""Graph-free memory offset planning for activations and kernel workspace.

Give it allocation requests (id, bytes, first and last step, device, alignment); `plan` returns a
`MemoryPlan` with an offset per request and a peak per device, beside the lower bound no plan
can beat, and `validate` proves the plan correct. `plan_graph` builds the requests from an
ort_graph graph and an execution order (in-place reuse, workspace slots as negative ids);
`PatternCache`, `ExecutionBuffers` and `RedZoneGuard` are the runtime side; `bench` measures.
"""

from ._bound import busiest_step, lower_bound
from ._buffers import Allocator, ExecutionBuffers, HostAccess, HostAllocator, RetainingHostAllocator
from ._cache import PatternCache, ShapeKey, TraceRecorder, requests_from_trace, shape_key
from ._errors import (
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
from ._graph import Activations, activation_lifetimes, may_inplace
from ._online import OnlinePlanner
from ._planners import ALGORITHMS, plan
from ._redzone import RedZoneGuard
from ._types import DEFAULT_ALIGNMENT, MAX_BYTES, AllocationRequest, MemoryPlan, align_up, buffer_margin
from ._validate import validate
from ._workspace import GraphPlan, SlotKey, plan_graph, workspace_requests

__version__ = "0.2.0"

__all__ = [
    "ALGORITHMS", "DEFAULT_ALIGNMENT", "MAX_BYTES", "Activations", "AllocationRequest", "Allocator", "BudgetExceededError",
    "ConcurrentRunError", "ConstInputWritten", "HostMemoryError", "ExecutionBuffers", "GraphPlan", "HostAccess", "HostAllocator", "InvalidRequestError", "RetainingHostAllocator",
    "LookupMissError", "MemPlanError", "MemoryPlan", "MisalignedError", "OnlinePlanner", "OverlapError",
    "PatternCache", "PlanValidationError", "RedZoneGuard", "RedZoneViolation", "ShapeKey", "SizeOverflowError", "SlotKey",
    "TraceError", "TraceRecorder", "__version__", "activation_lifetimes", "align_up", "buffer_margin", "busiest_step",
    "lower_bound", "may_inplace", "plan", "plan_graph", "requests_from_trace", "shape_key", "validate",
    "workspace_requests",
]
