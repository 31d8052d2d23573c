"""Device discovery through the CUDA driver, and the properties that estimates use."""

from __future__ import annotations

import attrs

from ort_partition import PROFILES, DeviceProfile

from ._errors import DeviceUnavailableError

__all__ = ["DeviceInfo", "discover", "NO_DEVICE_REMEDY"]

NO_DEVICE_REMEDY = (
    "run on a machine with an NVIDIA GPU and driver, or plan for a target GPU without one with "
    "CudaExecutionProvider(profile='h100') / `--device-profile h100` (nodes then run on the next EP)"
)


@attrs.define(frozen=True)
class DeviceInfo:
    """A real device: its driver-reported properties as a DeviceProfile, plus identity."""

    ordinal: int
    name: str
    profile: DeviceProfile
    driver_version: int


def _check(result: tuple, what: str):
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        from cuda.bindings import driver

        _, name = driver.cuGetErrorName(err)
        raise DeviceUnavailableError(f"{what} failed with {name.decode() if isinstance(name, bytes) else name!r}")
    return values[0] if len(values) == 1 else tuple(values)


def _attr(dev, attribute) -> int:
    from cuda.bindings import driver

    return int(_check(driver.cuDeviceGetAttribute(attribute, dev), f"cuDeviceGetAttribute({attribute.name})"))


def _bandwidth(name: str, dev) -> int:
    """Peak DRAM bandwidth: 2 x memory clock x bus width, or the matching profile's figure."""
    from cuda.bindings import driver

    A = driver.CUdevice_attribute
    try:
        clock_khz = _attr(dev, A.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
        bus_bits = _attr(dev, A.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)
        if clock_khz > 0 and bus_bits > 0:
            return 2 * clock_khz * 1000 * bus_bits // 8
    except DeviceUnavailableError:
        pass
    for p in PROFILES.values():
        if p.name.replace("rtx", "") in name.lower().replace(" ", ""):
            return p.memory_bandwidth
    return 0


def discover(device_id: int = 0) -> DeviceInfo:
    """The device ``device_id`` as the driver reports it; DeviceUnavailableError says why not."""
    try:
        from cuda.bindings import driver
    except ImportError as e:  # pragma: no cover - cuda-python is a dependency
        raise DeviceUnavailableError(f"cuda-python is not importable: {e!r}") from e
    try:
        _check(driver.cuInit(0), "cuInit")
    except DeviceUnavailableError:
        raise
    except Exception as e:  # the driver library itself is missing
        raise DeviceUnavailableError(f"the CUDA driver library could not be loaded: {e}") from e
    count = int(_check(driver.cuDeviceGetCount(), "cuDeviceGetCount"))
    if not 0 <= device_id < count:
        raise DeviceUnavailableError(f"device_id {device_id!r} is out of range: the driver reports {count} device(s)")
    dev = _check(driver.cuDeviceGet(device_id), "cuDeviceGet")
    raw = _check(driver.cuDeviceGetName(256, dev), "cuDeviceGetName")
    name = raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)
    A = driver.CUdevice_attribute
    total = int(_check(driver.cuDeviceTotalMem(dev), "cuDeviceTotalMem"))
    cc = (_attr(dev, A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), _attr(dev, A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
    profile = DeviceProfile(
        name=f"cuda:{device_id}",
        display_name=name,
        sm_count=_attr(dev, A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        memory_bytes=total,
        compute_capability=cc,
        memory_bandwidth=_bandwidth(name, dev),
        shared_memory_per_block_optin=_attr(dev, A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        max_threads_per_block=_attr(dev, A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        warp_size=_attr(dev, A.CU_DEVICE_ATTRIBUTE_WARP_SIZE),
    )
    version = int(_check(driver.cuDriverGetVersion(), "cuDriverGetVersion"))
    return DeviceInfo(device_id, name, profile, version)
