"""ONNX Runtime's option surface: `GraphOptimizationLevel`, `ExecutionMode`, `RunOptions`, and the
`SessionOptions` attributes and methods ONNX Runtime users set (the fields live on `SessionOptions`,
`_options.py`; their checks and the methods live here).

Honoured: `graph_optimization_level` (ORT_DISABLE_ALL turns our fusions off), `intra_op_num_threads`
(kept for the CPU provider's thread pool), `optimized_model_filepath` (the model after our fusions is
saved there), `enable_profiling` / `profile_file_prefix`, `add_free_dimension_override_by_name`,
`register_custom_ops_library` (an ort-abi kernel library), `add_initializer`, `enable_cpu_mem_arena` (True,
the default: the host buffer of a run without pre-allocated buffers is kept for the next run, as onnxruntime's
CPU arena keeps its memory; False: freed when the run ends). Accepted with a note
(`OrtOptionNoteWarning`, once per attribute and process) where they mean nothing here:
`inter_op_num_threads`, `execution_mode=ORT_PARALLEL`, `enable_mem_pattern=False`,
`enable_mem_reuse=False`, `log_severity_level`, `log_verbosity_level`,
`use_deterministic_compute`.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from ._errors import InvalidOptionError
from ._option_checks import _fail, _is_int


class GraphOptimizationLevel(enum.IntEnum):
    """ONNX Runtime's levels. Here: ORT_DISABLE_ALL runs no fusion; every other level runs ours (the L1
    fusions of ort-graph, which keep the names of the nodes they replace)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """ONNX Runtime's modes. Runs here are always sequential (in the planned order)."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class OrtOptionNoteWarning(UserWarning):
    """An ONNX Runtime option was accepted but has no effect in ort-session; the message says why."""


_NOTED: set[str] = set()


def note_once(option: str, why: str) -> None:
    """Warn once per option and process: scripts written for ONNX Runtime set these on every session."""
    if option in _NOTED:
        return
    _NOTED.add(option)
    warnings.warn(f"{option}: accepted for ONNX Runtime compatibility but has no effect in ort-session: {why}",
                  OrtOptionNoteWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The stack level of the first frame outside attrs and ort-session: the user's line that set the option."""
    import sys

    frame, level = sys._getframe(2), 2  # the caller of note_once: stacklevel 2
    here = __file__.rsplit("/", 1)[0]
    while frame is not None and (frame.f_code.co_filename.startswith(here) or "attr" in frame.f_code.co_filename
                                 or frame.f_code.co_filename.startswith("<attrs")):
        frame, level = frame.f_back, level + 1
    return level


def _int_of(value: Any) -> int | None:
    """An int from an int, a numpy int or an enum (ours or ONNX Runtime's pybind11 enums); None otherwise."""
    if _is_int(value):
        return int(value)
    if not isinstance(value, bool | float | str | bytes) and hasattr(value, "__int__") and hasattr(value, "name"):
        return int(value)
    return None


def enum_option(option: str, kind: type[enum.IntEnum]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        number = kind[value].value if isinstance(value, str) and value in kind.__members__ else _int_of(value)
        if number is None or number not in {m.value for m in kind}:
            raise _fail(option, value, f"one of {[m.name for m in kind]} ({kind.__name__}.<name>, its name as a str, or its int)")
        member = kind(number)
        if kind is ExecutionMode and member is ExecutionMode.ORT_PARALLEL:
            note_once(option, "nodes run one at a time in the planned order (the memory plan relies on it)")
        return member
    return check


def count_option(option: str, default: int, maximum: int, note: str = "") -> Callable[[Any], int]:
    """A non-negative int in [0, maximum]; `note`: why a value other than `default` means nothing here."""
    def check(value: Any) -> int:
        number = _int_of(value)
        if number is None or isinstance(value, enum.Enum) or not 0 <= number <= maximum:
            raise _fail(option, value, f"an int from 0 to {maximum}")
        if note and number != default:
            note_once(option, note)
        return number
    return check


def flag_option(option: str, default: bool, note: str = "") -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if not isinstance(value, bool | np.bool_):
            raise _fail(option, value, "a bool (True or False)")
        if note and bool(value) != default:
            note_once(option, note)
        return bool(value)
    return check


def text_option(option: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        import os

        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str):
            raise _fail(option, value, "a str")
        return value
    return check


def initializer_overrides(value: Any) -> dict[str, np.ndarray]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, np.ndarray) for k, v in value.items()):
        raise _fail("initializer_overrides", value, "a dict of initializer name -> numpy array",
                    "use SessionOptions.add_initializer(name, OrtValue)")
    return value


NO_POOL = "the CPU provider runs nodes one at a time; only intra_op_num_threads sizes its thread pool"
NO_ARENA = "memory is planned per session (offsets in pre-planned blocks), there is no arena to switch"
NO_LOG = "ort-session reports through Python warnings and exceptions; filter them with the `warnings` module"
DETERMINISTIC = "kernels here have no nondeterministic variant to switch off"


class OrtSessionOptionMethods:
    """ONNX Runtime's SessionOptions methods, mixed into `SessionOptions`."""

    __slots__ = ()
    config: dict[str, str]
    free_dimension_overrides: dict[str, int]
    kernel_libraries: list[str]
    initializer_overrides: dict[str, np.ndarray]

    def get_session_config_entry(self, key: str) -> str:
        if key not in self.config:
            raise InvalidOptionError(f"session config key {key!r} is not set; the keys set are {sorted(self.config)!r} "
                                     "(add it with add_session_config_entry)")
        return self.config[key]

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Fix a symbolic dimension (ONNX Runtime's name; same as `free_dimension_overrides[dim_name]`; an
        input's axis as `INPUT.AXIS`, e.g. 'x.2', for a -1 or unnamed dim)."""
        self.free_dimension_overrides = {**self.free_dimension_overrides, dim_name: dim_value}

    def add_free_dimension_override_by_denotation(self, dim_denotation: str, dim_value: int) -> None:
        raise InvalidOptionError(
            f"add_free_dimension_override_by_denotation({dim_denotation!r}, {dim_value!r}): ort-session does not read "
            "dimension denotations; override the dimension by its name with add_free_dimension_override_by_name")

    def register_custom_ops_library(self, library_path: str) -> None:
        """Load a C kernel library built against ort-abi's headers (`abi/include/`), as `kernel_libraries`
        does; a library built for ONNX Runtime's custom-op API is refused at session creation, naming it."""
        self.kernel_libraries = [*self.kernel_libraries, library_path]

    def add_initializer(self, name: str, ort_value: Any) -> None:
        """Replace initializer `name` with this value (an OrtValue or a numpy array) in sessions created with
        these options; its dtype and shape must match the model's (checked at session creation)."""
        if not isinstance(name, str) or not name:
            raise _fail("add_initializer", name, "a non-empty str initializer name")
        array = ort_value.numpy() if hasattr(ort_value, "numpy") and not isinstance(ort_value, np.ndarray) else ort_value
        if not isinstance(array, np.ndarray):
            raise _fail("add_initializer", ort_value, "an OrtValue or a numpy array",
                        "make one with OrtValue.ortvalue_from_numpy(array)")
        self.initializer_overrides = {**self.initializer_overrides, name: array}

    def add_external_initializers(self, names: list[str], ort_values: list[Any]) -> None:
        if len(names) != len(ort_values):
            raise _fail("add_external_initializers", (len(names), len(ort_values)), "as many values as names")
        for name, value in zip(names, ort_values):
            self.add_initializer(name, value)


@attrs.define
class RunOptions:
    """ONNX Runtime's RunOptions. `terminate = True` (from any thread) stops a run between two nodes (or two
    iterations of a Loop / Scan, nested bodies included) with
    `RunTerminatedError`; the log levels and tag are kept (and shown in profiles) but change no output."""

    log_severity_level: int = attrs.field(default=2, converter=count_option("log_severity_level", 2, 4))
    log_verbosity_level: int = attrs.field(default=0, converter=count_option("log_verbosity_level", 0, 1000))
    logid: str = attrs.field(default="", converter=text_option("logid"))
    terminate: bool = attrs.field(default=False, converter=flag_option("terminate", False))
    only_execute_path_to_fetches: bool = attrs.field(default=False,
                                                     converter=flag_option("only_execute_path_to_fetches", False))
    config: dict[str, str] = attrs.field(factory=dict)

    @property
    def run_tag(self) -> str:
        """ONNX Runtime's older name of `logid`."""
        return self.logid

    @run_tag.setter
    def run_tag(self, value: str) -> None:
        self.logid = value

    def add_run_config_entry(self, key: str, value: str) -> None:
        from ._option_checks import config_key, config_value

        self.config[config_key(key)] = config_value(key, value)

    def get_run_config_entry(self, key: str) -> str:
        if key not in self.config:
            raise InvalidOptionError(f"run config key {key!r} is not set; the keys set are {sorted(self.config)!r}")
        return self.config[key]


__all__ = ["ExecutionMode", "GraphOptimizationLevel", "OrtOptionNoteWarning", "RunOptions"]
