"""ort-cpu-ep: the CPU execution provider and its op library (numpy kernels).

    from ort_cpu_ep import CpuExecutionProvider
    ep = CpuExecutionProvider(model.graph, model.opset_imports)
    ep.claim(node)            # Supported(cost) or Declined(node, op, rejected, accepts, remedy)
    kernel = ep.create_kernel(node)

`ort_cpu_ep.ops` is the op library (`find`, `run_graph`, `OpImpl`, `register`); every op in it is one
`ort_abi.KernelRegistry.add_kernel_v2` entry of the provider. `SimulatedGpuExecutionProvider` is a
testing device: the same kernels on a device whose memory the host cannot read, held to a budget.
"""

from ._device_kernels import StagedKernel
from ._provider import (
    MEMCPY_OPS,
    CpuExecutionProvider,
    NumpyKernel,
    SimulatedGpuExecutionProvider,
    builtin_registry,
    register_numpy_kernels,
)
from .ops import CpuOpError, Decline, InputInfo, OpImpl, find, register, run_graph

__version__ = "0.1.0"

__all__ = [
    "MEMCPY_OPS", "CpuExecutionProvider", "CpuOpError", "Decline", "InputInfo", "NumpyKernel", "OpImpl",
    "SimulatedGpuExecutionProvider", "StagedKernel", "__version__", "builtin_registry", "find", "register",
    "register_numpy_kernels", "run_graph",
]
