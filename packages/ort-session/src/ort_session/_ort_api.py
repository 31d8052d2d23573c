"""ONNX Runtime's module-level API and constructor forms: `NodeArg`, `ModelMetadata`,
`get_available_providers`, `get_all_providers`, and the normalization of `InferenceSession`'s
arguments (`sess_options=`, `providers=[(name, options)]`, `provider_options=[...]`).

Provider options read here: `gpu_mem_limit` (bytes, or a size like '6GiB') becomes the provider's
device budget (as `budgets="<provider>=<bytes>"`), `device_id` picks the CUDA device. Other keys are
accepted with an `UnknownConfigKeyWarning` naming the closest key read, so a typo never passes silently.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ._errors import InvalidOptionError
from ._options import DISABLE_CPU_EP_FALLBACK, SessionOptions, UnknownConfigKeyWarning, _truthy

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
SIMULATED_GPU = "SimulatedGPUExecutionProvider"
ALIASES = {"cpu": CPU, "cpuexecutionprovider": CPU, "cuda": CUDA, "cudaexecutionprovider": CUDA,
           "simgpu": SIMULATED_GPU, "simulatedgpuexecutionprovider": SIMULATED_GPU}
COPY_OPS = ("MemcpyFromHost", "MemcpyToHost", "MemcpyDeviceToDevice")  # boundary copies, not the model's nodes
PROVIDER_OPTION_KEYS = {CUDA: ("device_id", "gpu_mem_limit"), SIMULATED_GPU: ("device_id", "gpu_mem_limit"), CPU: ()}


@attrs.frozen
class NodeArg:
    """A model input or output as ONNX Runtime describes it: `shape` has ints for fixed dimensions, the
    name of a symbolic dimension as a str, None for an unknown one; `type` is 'tensor(float)'..."""

    name: str
    type: str
    shape: list[int | str | None] | None

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


@attrs.frozen
class ModelMetadata:
    """The model's metadata, as ONNX Runtime's `get_modelmeta()` returns it."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str]


def node_arg(name: str, dtype: int, shape: Sequence[Any] | None) -> NodeArg:
    from ._ortvalue import type_string

    dims = None if shape is None else [d if isinstance(d, int | str) else None for d in shape]
    return NodeArg(name, type_string(dtype), dims)


@functools.lru_cache(maxsize=1)
def cuda_device_count() -> int:
    """CUDA devices the driver reports (0 without ort-cuda-ep, a driver or a device)."""
    try:
        import ort_cuda_ep
    except ImportError:
        return 0
    count = 0
    while count < 64:  # the driver numbers devices 0..n-1; discover refuses the first id past the end
        try:
            ort_cuda_ep.discover(count)
        except Exception:  # noqa: BLE001 - DeviceUnavailableError, or a driver that cannot be loaded
            break
        count += 1
    return count


def get_available_providers() -> list[str]:
    """Providers that can run here: CUDA only when a CUDA device is present, our simulated GPU (a device
    with its own budgeted memory, run by the CPU kernels), and the CPU — in ONNX Runtime's priority order."""
    return ([CUDA] if cuda_device_count() else []) + [SIMULATED_GPU, CPU]


def get_all_providers() -> list[str]:
    """Every provider ort-session knows, present on this machine or not."""
    return [CUDA, SIMULATED_GPU, CPU]


def canonical(name: str) -> str:
    return ALIASES.get(name.lower(), name) if isinstance(name, str) else name


def _provider_list(providers: Any, provider_options: Any) -> tuple[list[str], list[dict[str, Any]]]:
    if providers is None:
        if provider_options is not None:
            raise InvalidOptionError("provider_options was given without providers; give providers=[...] of the same "
                                     "length")
        return [], []
    if isinstance(providers, str) or not isinstance(providers, Sequence):
        raise InvalidOptionError(f"providers={providers!r}: expected a list of provider names or (name, options) "
                                 f"pairs, e.g. [{CUDA!r}, {CPU!r}]")
    names, options = [], []
    for entry in providers:
        if isinstance(entry, tuple | list) and len(entry) == 2 and isinstance(entry[1], Mapping):
            names.append(entry[0])
            options.append(dict(entry[1]))
        else:
            names.append(entry)
            options.append({})
        if not isinstance(names[-1], str):
            raise InvalidOptionError(f"providers entry {entry!r}: expected a provider name or a (name, options dict) "
                                     "pair")
    if provider_options is not None:
        if isinstance(provider_options, Mapping) or not isinstance(provider_options, Sequence) \
                or len(provider_options) != len(names) or not all(isinstance(o, Mapping) for o in provider_options):
            raise InvalidOptionError(f"provider_options={provider_options!r}: expected a list of dicts, one per "
                                     f"provider in {names!r}")
        if any(options):
            raise InvalidOptionError("provider options were given both in providers=[(name, options)] and in "
                                     "provider_options=; give them in one place")
        options = [dict(o) for o in provider_options]
    return names, options


def _checked_provider_options(name: str, given: Mapping[Any, Any]) -> dict[str, str]:
    known = PROVIDER_OPTION_KEYS.get(name, ())
    out: dict[str, str] = {}
    for key, value in given.items():
        if not isinstance(key, str):
            raise InvalidOptionError(f"{name} option key {key!r} ({type(key).__name__}) must be a str")
        if key not in known:
            import difflib  # only for a key no provider reads: not on every session's import

            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; the keys it reads are {list(known)!r}"
            warnings.warn(f"{name} option {key!r} is not read by ort-session and has no effect{hint}",
                          UnknownConfigKeyWarning, stacklevel=4)
        out[key] = value if isinstance(value, str) else str(int(value) if isinstance(value, bool) else value)
    if "device_id" in out:
        text = out["device_id"].strip()
        if not text.isdigit() or len(text) > 4:
            raise InvalidOptionError(f"{name} option 'device_id'={given['device_id']!r}: expected a non-negative int "
                                     "such as 0")
        device_id, count = int(text), cuda_device_count()
        if name == SIMULATED_GPU and device_id != 0:
            raise InvalidOptionError(f"{name} option 'device_id'={device_id}: the simulated GPU is one device, id 0")
        if name == CUDA and count and device_id >= count:
            raise InvalidOptionError(f"{name} option 'device_id'={device_id}: this machine has {count} CUDA device(s) "
                                     f"(ids 0..{count - 1})")
        out["device_id"] = str(device_id)
    return out


def normalize_arguments(options: Any, providers: Any, provider_options: Any,
                        kwargs: dict[str, Any]) -> tuple[SessionOptions, list[str] | None]:
    """ONNX Runtime's constructor forms -> (our SessionOptions, provider names). `kwargs` loses the keys read."""
    if "sess_options" in kwargs:
        if options is not None:
            raise InvalidOptionError("session options were given twice (positionally and as sess_options=); give one")
        options = kwargs.pop("sess_options")
    opts = options if isinstance(options, SessionOptions) else SessionOptions.from_mapping(options)
    names, per_provider = _provider_list(providers, provider_options)
    names = [canonical(n) for n in names]
    checked = {n: _checked_provider_options(n, o) for n, o in zip(names, per_provider) if o}
    if not checked:
        return opts, names or None
    limits = []
    for name, given in checked.items():
        if "gpu_mem_limit" in given:
            if name == CPU:
                raise InvalidOptionError("gpu_mem_limit was given for CPUExecutionProvider; it limits a GPU provider")
            limits.append(f"{name}={given['gpu_mem_limit']}")
    budgets = opts.budgets
    if limits:
        from . import _option_checks

        if budgets:
            raise InvalidOptionError(f"gpu_mem_limit ({', '.join(limits)}) and budgets={budgets!r} both set a device "
                                     "budget; give one of them")
        budgets = _option_checks.budgets(", ".join(limits))
    return attrs.evolve(opts, budgets=budgets, provider_options=checked), names


def fallback_disabled(options: SessionOptions) -> bool:
    return _truthy(options.get(DISABLE_CPU_EP_FALLBACK, "0"), DISABLE_CPU_EP_FALLBACK)


def check_no_fallback(placement: Any, providers: Sequence[Any], graph: Any) -> None:
    """With CPU fallback disabled: every node must be on a requested provider other than the implicit CPU."""
    from ._errors import FallbackDisabledError

    first = providers[0].name
    if first == CPU:
        return
    moved = [n for n in graph.nodes if placement.ep_of.get(n.index) == CPU and n.op_type not in COPY_OPS]
    if not moved:
        return
    declines = {d.node: d for d in getattr(placement.result, "declines", ()) if getattr(d, "ep", None) == first}
    shown = []
    for node in moved[:8]:
        d = declines.get(node.name)
        why = f"{first} declined: {d.rejected}" if d is not None else "placed on the CPU by the budget"
        shown.append(f"{node.name!r} ({node.op_type}): {why}")
    more = f" and {len(moved) - 8} more" if len(moved) > 8 else ""
    raise FallbackDisabledError(
        f"CPU fallback is disabled ({DISABLE_CPU_EP_FALLBACK}=1 or disable_fallback()) but {len(moved)} node(s) would "
        f"run on the CPU instead of {first}: " + "; ".join(shown) + more
        + ". Enable the fallback, raise the budget, or add CPUExecutionProvider to providers explicitly")


def override_initializers(graph: Any, overrides: Mapping[str, Any]) -> None:
    """`SessionOptions.add_initializer`: replace initializers by name; the dtype and shape must match."""
    import ort_graph

    for name, array in overrides.items():
        old = graph.initializers.get(name)
        if old is None:
            raise InvalidOptionError(f"add_initializer({name!r}): the model has no initializer of that name; its "
                                     f"initializers include {sorted(graph.initializers)[:8]!r}")
        try:
            dtype = ort_graph.from_numpy_dtype(array.dtype)
        except (KeyError, TypeError, ValueError):
            dtype = None
        if dtype != old.dtype or tuple(array.shape) != tuple(old.dims):
            raise InvalidOptionError(
                f"add_initializer({name!r}): got {array.dtype}{list(array.shape)}, the model's initializer is "
                f"{ort_graph.to_numpy_dtype(old.dtype)}{list(old.dims)}; give a value of the same dtype and shape")
    for name, array in overrides.items():  # every override checked before any is applied
        graph.initializers[name] = ort_graph.Tensor.from_numpy(name, array)


__all__ = ["ModelMetadata", "NodeArg", "get_all_providers", "get_available_providers"]
