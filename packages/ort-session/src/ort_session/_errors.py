"""The ort-session exception hierarchy."""

from __future__ import annotations

import ort_memplan

from ._ort_errors import (
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    NoSuchFile,
    NotImplemented,
    RuntimeException,
)


class SessionError(Fail):
    """Base class of every error raised by ort-session (an ONNX Runtime `Fail` too: see `_ort_errors`)."""


class InvalidOptionError(SessionError, InvalidArgument, ValueError):
    """A session option is unknown, malformed, of the wrong type or contradicts another option (a
    ValueError too, like the parse errors of ort-partition it often wraps)."""


class InvalidInputError(SessionError, InvalidArgument, ValueError):
    """A run's feeds do not match the model's inputs (name, dtype, rank or shape); a ValueError too, as
    ONNX Runtime raises for missing inputs."""


class PlacementError(SessionError, NotImplemented):
    """A node could not be placed on any execution provider; the message lists every decline."""


class KernelRunError(SessionError):
    """A kernel failed during a run; the message names the node, op and execution provider."""


class RedZoneError(KernelRunError, ort_memplan.RedZoneViolation):
    """Under red zones (`red_zones` / ORT_LOWMEM_RED_ZONES), a kernel wrote outside its block: the session's
    `KernelRunError` (an ONNX Runtime `Fail`) carrying ort-memplan's `RedZoneViolation` fields (node, block, step,
    side, distance, first_bad_byte)."""

    @classmethod
    def of(cls, err: ort_memplan.RedZoneViolation) -> RedZoneError:
        return cls(str(err), node=err.node, block=err.block, step=err.step, first_bad_byte=err.first_bad_byte,
                   side=err.side, distance=err.distance)


class ConstInputWrittenError(KernelRunError, ort_memplan.ConstInputWritten):
    """Under red zones, a kernel changed the bytes of an input it reads: the session's `KernelRunError` carrying
    ort-memplan's `ConstInputWritten` fields (node, input_name, step)."""

    @classmethod
    def of(cls, err: ort_memplan.ConstInputWritten) -> ConstInputWrittenError:
        return cls(str(err), node=err.node, input_name=err.input_name, step=err.step)


class DeviceMemoryError(SessionError, RuntimeException):
    """Initialization could not allocate a device's planned memory (weights, pre-allocated buffers): the
    device has less free memory than the budget promised. Nothing stays allocated."""


class MemoryProfileWriteWarning(UserWarning):
    """The per-node memory statistics file (`memory_profile_out`) could not be written after a run; the
    run's outputs are still returned and the file is left as it was."""


class FeedExceedsPlanError(InvalidInputError):
    """A run's feed is larger than the shapes the session planned for (or of another rank) while the session
    holds its memory promise (device budgets or pre-allocated buffers): refused before any kernel runs."""

    def __init__(self, message: str, *, input_name: str = "", shape: tuple[int, ...] | None = None,
                 planned: tuple[int, ...] | None = None) -> None:
        super().__init__(message)
        self.input_name, self.shape, self.planned = input_name, shape, planned


class UnplannedAllocationError(SessionError, RuntimeException):
    """A run with pre-allocated execution buffers asked for memory outside the plan (a scratch buffer, more
    workspace than declared, an output without a planned block): raised at that node, never counted later."""

    def __init__(self, message: str, *, node: str = "", requested: int = 0, planned: int | None = None) -> None:
        super().__init__(message)
        self.node, self.requested, self.planned = node, requested, planned


class WorkspaceVerificationError(UnplannedAllocationError):
    """`session.strict_workspace_verification`: a kernel asked at run time for more workspace than it declared
    (Level 2) for the run's input shapes; raised at that node instead of a scratch fallback."""


class CaptureRefusedError(SessionError):
    """`session.enable_graph_capture`: the device graph capture cannot hold (no pre-allocated buffers, host
    work inside the captured region, a changed input shape, ...). `reason` names the cause; raised at
    initialization where it is knowable, else at the run that finds it."""

    def __init__(self, message: str, *, reason: str = "", node: str = "") -> None:
        super().__init__(message)
        self.reason, self.node = reason, node


class SessionBusyError(SessionError):
    """`close()` found runs still in flight after its timeout: nothing was freed; close again once they end."""


class UnplannedShapesWarning(UserWarning):
    """A budgeted device holds values of unknown size (symbolic dimensions left open) and the session was told
    to accept that (`session.allow_unplanned_shapes`) or only plans: the device allocator, not the plan, holds
    runs to the budget."""


class ModelLoadFailedError(SessionError):
    """The model could not be loaded; the subclass says why (ONNX Runtime's matching status is a base too)."""


class ModelFileNotFoundError(ModelLoadFailedError, NoSuchFile, FileNotFoundError):
    """The model path does not exist."""


class InvalidModelError(ModelLoadFailedError, InvalidProtobuf):
    """The bytes or the file are not an ONNX model (protobuf parse failed, or no graph)."""


class InvalidGraphError(ModelLoadFailedError, InvalidGraph):
    """The model parses but its graph is malformed or uses what ort-graph cannot load."""


class FallbackDisabledError(SessionError, EPFail):
    """CPU fallback is disabled (`session.disable_cpu_ep_fallback`, `disable_fallback()`) and nodes the
    requested providers declined would have moved to the CPU; the message names them and why."""


class RunTerminatedError(SessionError):
    """`RunOptions.terminate` was set: the run stopped between nodes (or Loop / Scan iterations); its outputs are discarded."""


class PlanOverBudgetError(SessionError):
    """Initialization refused: the memory plan needs more than a device's budget (weights + planned peak), so
    runs could not be served within it. Nothing was allocated."""
