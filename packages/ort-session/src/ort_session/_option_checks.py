"""Type and range checks of `SessionOptions` fields, run when a field is set (construction,
`from_mapping`, attribute assignment): a wrong value is refused there with `InvalidOptionError` naming
the option, showing the value and the expected type, instead of failing later inside planning."""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ._errors import InvalidOptionError

MAX_DIMENSION = 2**62  # a dimension override or max shape entry (element counts must still fit int64)
MAX_RED_ZONE = 2**20  # guard bytes between planned blocks: a debug aid, 1 MiB is plenty
MAX_THREADS = 1024  # intra_op_num_threads: the CPU provider refuses more (ort_cpu_ep.MAX_THREADS)


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 200 else f"<int of {value.bit_length()} bits>"
    return text if len(text) <= 120 else text[:100] + f"... ({len(text)} chars)"


def _fail(option: str, value: Any, expected: str, hint: str = "") -> InvalidOptionError:
    return InvalidOptionError(f"option {option!r}={_shown(value)} ({type(value).__name__}): expected {expected}"
                              + (f"; {hint}" if hint else ""))


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def _dim(option: str, value: Any, where: str) -> int:
    if not _is_int(value) or not 0 <= int(value) <= MAX_DIMENSION:
        raise _fail(option, value, f"a non-negative int (at most 2**62) for {where}",
                    "dimensions are whole numbers such as 1 or 4096 (numpy integers are accepted)")
    return int(value)


def boolean(option: str) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if isinstance(value, bool | np.bool_):
            return bool(value)
        raise _fail(option, value, "a bool (True or False)", "a string such as '0' would count as true")
    return check


def optional_str(option: str, path: bool = False) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value is None:
            return None
        if path and isinstance(value, os.PathLike):
            value = os.fspath(value)
        if isinstance(value, str):
            if path and "\0" in value:
                raise _fail(option, value, "a path without NUL bytes (no file system accepts one)")
            return value
        raise _fail(option, value, "a str path or None" if path else "a str or None")
    return check


def red_zone(value: Any) -> int:
    if not _is_int(value) or not 0 <= int(value) <= MAX_RED_ZONE:
        raise _fail("red_zones", value, f"an int of guard bytes from 0 (off) to {MAX_RED_ZONE}", "e.g. 64")
    return int(value)


def thread_count(value: Any) -> int:
    if not _is_int(value) or not 0 <= int(value) <= MAX_THREADS:
        raise _fail("intra_op_num_threads", value, f"an int from 0 (the physical cores) to {MAX_THREADS}",
                    "the threads of the CPU kernels and BLAS during a run, e.g. 1 or 4 (numpy integers are accepted)")
    return int(value)


def dimension_overrides(value: Any) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise _fail("free_dimension_overrides", value, "a dict of symbolic dimension name -> int", "e.g. {'batch': 1}")
    out: dict[str, int] = {}
    for name, dim in value.items():
        if not isinstance(name, str):
            raise _fail("free_dimension_overrides", value, "str dimension names", f"the key {_shown(name)} is not")
        out[name] = _dim("free_dimension_overrides", dim, f"dimension {name!r}")
    return out


def max_shapes(value: Any, option: str = "max_shapes") -> dict[str, list[int]] | None:
    if value is None:
        return None
    if isinstance(value, str):
        import ort_graph

        try:
            value = ort_graph.parse_max_shape_override(value)
        except (ort_graph.ShapeResolutionError, ValueError) as e:
            raise _fail(option, value, "'INPUT=[d0,d1,...];...' or a dict of input name -> list of ints",
                        str(e).splitlines()[0]) from e
    if not isinstance(value, Mapping):
        raise _fail(option, value, "a dict of input name -> list of ints", "e.g. {'input_ids': [8, 4096]}")
    out: dict[str, list[int]] = {}
    for name, shape in value.items():
        if not isinstance(name, str):
            raise _fail(option, value, "str input names", f"the key {_shown(name)} is not")
        if isinstance(shape, str | bytes) or not isinstance(shape, list | tuple | np.ndarray):
            raise _fail(option, shape, f"a list of ints for input {name!r}", "e.g. [8, 4096]")
        out[name] = [_dim(option, d, f"input {name!r}") for d in shape]
    return out


def kernel_libraries(value: Any) -> list[str]:
    option = "kernel_libraries"
    if isinstance(value, str | bytes | os.PathLike):
        raise _fail(option, value, "a list of shared library paths",
                    f"wrap a single path in a list: [{_shown(os.fsdecode(value))}]")
    if not isinstance(value, list | tuple):
        raise _fail(option, value, "a list of shared library paths", "e.g. ['./libmykernels.so']")
    out: list[str] = []
    for item in value:
        if not isinstance(item, str | os.PathLike):
            raise _fail(option, value, "a list of str paths", f"the entry {_shown(item)} is not a path")
        out.append(os.fspath(item))
    return out


def budgets(value: Any) -> Any:
    """Checked by parsing (ort_partition.parse_budget); the value is kept as given ('' means none)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return value
    import ort_partition

    try:
        ort_partition.parse_budget(value)
    except ort_partition.BudgetError as e:
        raise _fail("budgets", value, "a budget string like 'cuda:6GiB' (or a mapping {'cuda': '6GiB'})",
                    str(e)) from e
    return value


def config(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _fail("config", value, "a dict of 'session.*' key -> str value")
    return {config_key(k): config_value(k, v) for k, v in value.items()}


def config_key(key: Any) -> str:
    if not isinstance(key, str):
        raise InvalidOptionError(f"config key {_shown(key)} ({type(key).__name__}) must be a str starting with 'session.'")
    return key


def config_value(key: str, value: Any) -> str:
    """ONNX Runtime config values are strings; bools and ints are written the way it reads them."""
    if isinstance(value, bool | np.bool_):
        return "1" if value else "0"
    if _is_int(value):
        return str(int(value))
    if isinstance(value, str):
        return value
    raise InvalidOptionError(f"config entry {key!r}={_shown(value)} ({type(value).__name__}): expected a str value "
                             "(ONNX Runtime config values are strings), e.g. '1'")
