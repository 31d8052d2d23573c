"""Device profiles: plan placement and workspace for a GPU that is not on this machine.

They live here (not in ort-cuda-ep) so that choosing and validating a profile, and the budget a
`cuda:90%` share of it means, need no CUDA wheel; ort-cuda-ep re-exports them."""

from __future__ import annotations

import attrs

from ._errors import UnknownProfileError

__all__ = ["DeviceProfile", "PROFILES", "get_profile", "profile_names"]

_MIB = 1 << 20


@attrs.define(frozen=True)
class DeviceProfile:
    """What planning needs to know about a GPU (the driver reports the same fields for a real one).

    ``memory_bandwidth`` is the peak DRAM bandwidth in bytes per second, used only to put kernel
    timings next to the memory-bandwidth limit.
    """

    name: str
    display_name: str
    sm_count: int
    memory_bytes: int
    compute_capability: tuple[int, int]
    memory_bandwidth: int
    shared_memory_per_block_optin: int = 48 * 1024
    max_threads_per_block: int = 1024
    warp_size: int = 32

    def __attrs_post_init__(self) -> None:
        if self.sm_count <= 0:
            raise ValueError(f"DeviceProfile {self.name!r}: sm_count must be positive, got {self.sm_count!r}")
        if self.memory_bytes <= 0:
            raise ValueError(f"DeviceProfile {self.name!r}: memory_bytes must be positive, got {self.memory_bytes!r}")

    @property
    def arch(self) -> str:
        """The NVRTC target, e.g. ``sm_90``."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"


# Numbers are the vendor's published figures; memory is what the driver reports (nvidia-smi MiB).
PROFILES: dict[str, DeviceProfile] = {
    p.name: p
    for p in (
        DeviceProfile("h200", "NVIDIA H200 (SXM, 141 GB HBM3e)", 132, 143771 * _MIB, (9, 0), 4_800_000_000_000, 227 * 1024),
        DeviceProfile("h100", "NVIDIA H100 (SXM5, 80 GB HBM3)", 132, 81559 * _MIB, (9, 0), 3_350_000_000_000, 227 * 1024),
        DeviceProfile("a100", "NVIDIA A100 (SXM4, 80 GB HBM2e)", 108, 81920 * _MIB, (8, 0), 2_039_000_000_000, 163 * 1024),
        DeviceProfile("a100-40gb", "NVIDIA A100 (SXM4, 40 GB HBM2)", 108, 40960 * _MIB, (8, 0), 1_555_000_000_000, 163 * 1024),
        DeviceProfile("l4", "NVIDIA L4 (24 GB GDDR6)", 58, 23034 * _MIB, (8, 9), 300_000_000_000, 99 * 1024),
        DeviceProfile("rtx4090", "NVIDIA GeForce RTX 4090 (24 GB GDDR6X)", 128, 24564 * _MIB, (8, 9), 1_008_000_000_000, 99 * 1024),
    )
}

_ALIASES = {"rtx-4090": "rtx4090", "4090": "rtx4090", "h100-sxm": "h100", "a100-80gb": "a100"}


def profile_names() -> list[str]:
    return sorted(PROFILES)


def get_profile(name: str) -> DeviceProfile:
    """The built-in profile called ``name`` (case-insensitive; ``rtx-4090`` and ``4090`` also work)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    try:
        return PROFILES[key]
    except KeyError:
        raise UnknownProfileError(
            f"unknown device profile {name!r}; known profiles: {', '.join(profile_names())} "
            "(pass one of these, or a DeviceProfile(...) you build for your GPU)"
        ) from None
