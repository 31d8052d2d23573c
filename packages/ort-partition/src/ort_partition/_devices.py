"""Device designators (`cpu`, `gpu`, `gpu:1`, `cuda`, `dml`, `npu`, `fpga`, `accelerator`, an EP name) -> execution
providers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

CPU_EP = "CPUExecutionProvider"
CUDA_EP = "CUDAExecutionProvider"

_GPU_EP_WORDS = ("cuda", "rocm", "migraphx", "dml", "tensorrt", "webgpu", "gpu")
_NPU_EP_WORDS = ("qnn", "vitisai", "npu", "openvino_npu")
_FPGA_EP_WORDS = ("fpga",)  # ONNX Runtime's OrtHardwareDeviceType_FPGA; no in-tree provider names one
DML_EP = "DmlExecutionProvider"


@attrs.frozen
class EpInfo:
    """What device matching needs to know about an execution provider."""

    name: str
    device_type: str = "cpu"  # "cpu" | "gpu" | "npu" | "fpga" | "unknown"
    device_id: int = 0
    vendor: str = ""
    device_name: str = ""  # the provider's own device name (`simgpu`), also accepted as a designator

    @classmethod
    def infer(cls, name: str, device_id: int = 0) -> EpInfo:
        """Guess the device type from a provider name (`CUDAExecutionProvider` -> gpu)."""
        low = name.lower()
        if "cpu" in low:
            kind = "cpu"
        elif any(w in low for w in _GPU_EP_WORDS):
            kind = "gpu"
        elif any(w in low for w in _NPU_EP_WORDS):
            kind = "npu"
        elif any(w in low for w in _FPGA_EP_WORDS):
            kind = "fpga"
        else:
            kind = "unknown"
        vendor = "nvidia" if ("cuda" in low or "tensorrt" in low) else ("amd" if "rocm" in low or "migraphx" in low else "")
        return cls(name=name, device_type=kind, device_id=device_id, vendor=vendor)


def ep_info(ep: Any) -> EpInfo:
    """Normalize a provider: an `EpInfo`, a name string, or any object with `.name` (and optionally
    `.device_type`, `.device_id`, `.vendor`)."""
    if isinstance(ep, EpInfo):
        return ep
    if isinstance(ep, str):
        return EpInfo.infer(ep)
    name = getattr(ep, "name", None)
    if not isinstance(name, str):
        raise TypeError(f"execution provider {ep!r} has no str `.name`; pass a name or an EpInfo")
    base = EpInfo.infer(name, int(getattr(ep, "device_id", 0) or 0))
    kind = getattr(ep, "device_type", None)
    vendor = getattr(ep, "vendor", None)
    device = getattr(ep, "device", None)
    return attrs.evolve(base, device_type=str(kind).lower() if kind else base.device_type,
                        vendor=str(vendor).lower() if vendor else base.vendor,
                        device_name=device.lower() if isinstance(device, str) else "")


def ep_infos(eps: Iterable[Any]) -> list[EpInfo]:
    return [ep_info(e) for e in eps]


def _matches(ep: EpInfo, designator: str) -> bool:
    kind, _, spec = designator.partition(":")
    kind_l, spec_l = kind.strip().lower(), spec.strip().lower()
    name_l = ep.name.lower()
    is_cuda = name_l in ("cudaexecutionprovider", "cudapluginexecutionprovider") or name_l.startswith("cuda")

    def index_ok() -> bool:
        return not spec_l or (spec_l.isdigit() and int(spec_l) == ep.device_id)

    if kind_l == "cpu":
        return ep.device_type == "cpu" or name_l == CPU_EP.lower()
    if kind_l == "gpu":
        if not (ep.device_type == "gpu" or is_cuda):
            return False
        if not spec_l or spec_l.isdigit():
            return index_ok()
        return spec_l == ep.vendor or (spec_l == "nvidia" and is_cuda)
    if kind_l == "cuda":
        return is_cuda and index_ok()
    if kind_l == "accelerator":
        return ep.device_type != "cpu" and name_l != CPU_EP.lower() and index_ok()
    if kind_l == "npu":
        return ep.device_type == "npu" and index_ok()
    if kind_l == "fpga":
        return ep.device_type == "fpga" and index_ok()
    if kind_l == "dml":  # DirectML (`dml`, `dml:<index>`)
        return name_l in (DML_EP.lower(), "dml") and index_ok()
    # the provider's own device name (`simgpu`, `cuda:0`), or its exact name, case-insensitive
    if ep.device_name and ep.device_name in (designator.strip().lower(), kind_l):
        return True
    return name_l == kind_l and index_ok() or name_l == designator.strip().lower()


def match_device(designator: str, eps: Sequence[Any]) -> str | None:
    """The first provider (in priority order) that a device designator names, or None.

    `cpu`, `gpu`, `gpu:<index>`, `gpu:<vendor>`, `cuda`, `cuda:<index>`, `dml`, `dml:<index>` (DirectML),
    `npu`, `npu:<index>`, `fpga`, `fpga:<index>`, `accelerator` (anything not CPU), or an execution
    provider's exact name — all case-insensitive.
    """
    for ep in ep_infos(eps):
        if _matches(ep, designator):
            return ep.name
    return None
