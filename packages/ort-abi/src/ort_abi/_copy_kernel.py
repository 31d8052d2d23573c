"""The boundary copy kernel: what every provider with its own memory runs for the copy nodes the session
inserts where a value crosses devices. It lives here, below the providers, because the CPU provider (the
simulated GPU), the CUDA adapter and any plugin EP use the same one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._buffers import copy_device_to_device, copy_host_to_device
from ._tensor import DeviceTensor, tensor_to_host

if TYPE_CHECKING:
    from ._context import KernelContext

__all__ = ["CopyKernel"]


class CopyKernel:
    """A boundary copy (MemcpyFromHost / MemcpyToHost / MemcpyDeviceToDevice): explicit host <-> device
    transfers between the tensors the context holds; values that are not tensors pass as they are."""

    def compute(self, ctx: KernelContext) -> None:
        src = ctx.input(0)
        if not isinstance(src, np.ndarray | np.generic | DeviceTensor) or np.dtype(src.dtype).kind == "O":
            ctx.outputs[0] = src  # sequences, optionals, strings: host objects, never planned
            return
        out = ctx.output(0, src.shape, src.dtype)
        if isinstance(src, DeviceTensor):
            if isinstance(out, DeviceTensor):
                _device_to_device(src, out)
            else:
                tensor_to_host(src, out)
        elif isinstance(out, DeviceTensor):
            if out.nbytes:
                copy_host_to_device(np.asarray(src, order="C"), out.buffer.view(0, out.nbytes))
        else:
            np.copyto(out, src)


def _device_to_device(src: DeviceTensor, dst: DeviceTensor) -> None:
    if not src.nbytes:
        return
    if src.device == dst.device:
        copy_device_to_device(src.buffer.view(0, src.nbytes), dst.buffer.view(0, dst.nbytes))
    else:  # two devices without a peer path: through the host
        copy_host_to_device(tensor_to_host(src).reshape(-1).view(np.uint8), dst.buffer.view(0, dst.nbytes))
