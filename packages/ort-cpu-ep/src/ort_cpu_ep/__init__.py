"""ort-cpu-ep: the CPU execution provider and its op library (numpy kernels).

    from ort_cpu_ep import CpuExecutionProvider
    ep = CpuExecutionProvider(model.graph, model.opset_imports)
    ep.claim(node)            # Supported(cost) or Declined(node, op, rejected, accepts, remedy)
    kernel = ep.create_kernel(node)

`ort_cpu_ep.ops` is the op library (`find`, `run_graph`, `OpImpl`, `register`); every op in it is one
`ort_abi.KernelRegistry.add_kernel_v2` entry of the provider. `SimulatedGpuExecutionProvider` is a
testing device: the same kernels on a device whose memory the host cannot read, held to a budget.

Threads: `CpuExecutionProvider(..., intra_op_num_threads=n)` (0: the physical cores) runs the kernels and
numpy's BLAS with n threads during each run (`run_scope()`); kernels read the count from
`intra_op_threads()`, and `intra_op_thread_scope(n)` sets it (and BLAS) for any block of code.
"""

from . import _ckernels as c_kernels
from ._ckernels import CKernelsUnavailableWarning
from ._device_kernels import StagedKernel
from ._errors import CpuEpError, ThreadCountError
from ._provider import (
    MEMCPY_OPS,
    CpuExecutionProvider,
    NumpyKernel,
    SimulatedGpuExecutionProvider,
    builtin_registry,
    register_numpy_kernels,
)
from ._threads import MAX_THREADS, intra_op_thread_scope, intra_op_threads, physical_cores
from .ops import CpuOpError, Decline, InputInfo, OpImpl, find, register, run_graph
from .ops._body_steps import BodySteps, control_bodies

__version__ = "0.1.0"

__all__ = [
    "MAX_THREADS", "MEMCPY_OPS", "BodySteps", "CKernelsUnavailableWarning", "CpuEpError", "CpuExecutionProvider", "CpuOpError", "Decline", "InputInfo",
    "NumpyKernel", "OpImpl", "SimulatedGpuExecutionProvider", "StagedKernel", "ThreadCountError", "__version__",
    "builtin_registry", "c_kernels", "control_bodies", "find", "intra_op_thread_scope", "intra_op_threads", "physical_cores", "register",
    "register_numpy_kernels", "run_graph",
]
