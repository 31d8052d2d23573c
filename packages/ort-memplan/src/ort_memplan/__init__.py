"""Graph-free memory offset planning for activations and kernel workspace.

Give it allocation requests (id, bytes, first and last step, device, alignment); it returns a
`MemoryPlan` with an offset per request and a peak per device, beside the lower bound no plan
can beat, and `validate` proves the plan correct.
"""

from ._bound import busiest_step, lower_bound
from ._errors import (
    BudgetExceededError,
    ConcurrentRunError,
    InvalidRequestError,
    LookupMissError,
    MemPlanError,
    MisalignedError,
    OverlapError,
    PlanValidationError,
    RedZoneViolation,
    TraceError,
)
from ._online import OnlinePlanner
from ._planners import ALGORITHMS, plan
from ._types import DEFAULT_ALIGNMENT, AllocationRequest, MemoryPlan, align_up
from ._validate import validate

__version__ = "0.1.0"

__all__ = [
    "ALGORITHMS", "DEFAULT_ALIGNMENT", "AllocationRequest", "BudgetExceededError", "ConcurrentRunError",
    "InvalidRequestError", "LookupMissError", "MemPlanError", "MemoryPlan", "MisalignedError",
    "OnlinePlanner", "OverlapError", "PlanValidationError", "RedZoneViolation", "TraceError",
    "__version__", "align_up", "busiest_step", "lower_bound", "plan", "validate",
]
