"""Session options. Keys mirror ONNX Runtime's session config names where one exists."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from . import _option_checks as _check
from ._errors import InvalidOptionError

LAYER_ASSIGNMENT = "session.layer_assignment_settings"
NAME_BASED_ASSIGNMENT = "session.name_based_layer_assignment"
PRE_ALLOCATE = "session.pre_allocate_execution_buffers"
CUDA_PARTITIONING = "session.resource_cuda_partitioning_settings"
MAX_SHAPE_OVERRIDE = "session.max_shape_override"
ALLOW_UNPLANNED_SHAPES = "session.allow_unplanned_shapes"  # budgets with symbolic dims left open: warn, not refuse
KNOWN_CONFIG_KEYS = (LAYER_ASSIGNMENT, NAME_BASED_ASSIGNMENT, PRE_ALLOCATE, CUDA_PARTITIONING, MAX_SHAPE_OVERRIDE,
                     ALLOW_UNPLANNED_SHAPES)


class UnknownConfigKeyWarning(UserWarning):
    """A `session.*` config key ort-session does not read (ONNX Runtime keys are accepted, typos are flagged)."""


def _truthy(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise InvalidOptionError(f"option {key!r}={value!r} is not a boolean; use '1' or '0'")


@attrs.define
class SessionOptions:
    """Everything a session needs to know before loading.

    `config` holds ONNX Runtime-style string entries (`session.layer_assignment_settings`, ...);
    the typed fields are this project's additions (budgets, dimension overrides, kernel libraries).
    """

    # every field is checked (and converted: numpy ints -> int, paths -> str) when set: `_option_checks`
    config: dict[str, str] = attrs.field(factory=dict, converter=_check.config)
    # "cuda:6GiB" or several, see ort_partition.parse_budget
    budgets: str | None = attrs.field(default=None, converter=_check.budgets)
    free_dimension_overrides: dict[str, int] = attrs.field(factory=dict, converter=_check.dimension_overrides)
    max_shapes: dict[str, list[int]] | None = attrs.field(default=None, converter=_check.max_shapes)
    kernel_libraries: list[str] = attrs.field(factory=list, converter=_check.kernel_libraries)
    enable_fusions: bool = attrs.field(default=True, converter=_check.boolean("enable_fusions"))
    # auto-fit: cut inside a layer instead of at whole layers
    node_level_cutoff: bool = attrs.field(default=False, converter=_check.boolean("node_level_cutoff"))
    red_zones: int = attrs.field(default=0, converter=_check.red_zone)  # debug guard bytes between blocks (0: off)
    # plan for a GPU that is not present (ort-cuda-ep profiles)
    device_profile: str | None = attrs.field(default=None, converter=_check.optional_str("device_profile"))
    # write per-node memory CSV (ONNX Runtime's stats format)
    memory_profile_out: str | None = attrs.field(default=None,
                                                 converter=_check.optional_str("memory_profile_out", path=True))
    # trace host allocations during each run (tracemalloc; costs time): `last_run_stats.traced_bytes`
    measure_host_allocations: bool = attrs.field(default=False, converter=_check.boolean("measure_host_allocations"))

    def add_session_config_entry(self, key: str, value: str) -> None:
        key = _check.config_key(key)
        value = _check.config_value(key, value)
        if not key.startswith("session."):
            raise InvalidOptionError(f"config key {key!r} must start with 'session.'; known keys: {KNOWN_CONFIG_KEYS!r}")
        if key not in KNOWN_CONFIG_KEYS:  # ONNX Runtime has many more keys: accepted, but a typo must not pass silently
            import difflib
            import warnings

            close = difflib.get_close_matches(key, KNOWN_CONFIG_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; the keys it reads are {list(KNOWN_CONFIG_KEYS)!r}"
            warnings.warn(f"session config key {key!r} is not read by ort-session and has no effect{hint}",
                          UnknownConfigKeyWarning, stacklevel=3)
        if key in (PRE_ALLOCATE, ALLOW_UNPLANNED_SHAPES):
            _truthy(value, key)
        elif key == MAX_SHAPE_OVERRIDE:
            _check.max_shapes(value, option=key)
        self.config[key] = value

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.config.get(key, default)

    @property
    def pre_allocate(self) -> bool:
        return _truthy(self.config.get(PRE_ALLOCATE, "0"), PRE_ALLOCATE)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> SessionOptions:
        opts = cls()
        if options is not None and not isinstance(options, Mapping):
            raise InvalidOptionError(f"session options must be a mapping of option name -> value or a SessionOptions, "
                                     f"got {type(options).__name__}")
        for key, value in (options or {}).items():
            _check.config_key(key)
            if key.startswith("session."):
                opts.add_session_config_entry(key, value)
            elif key in attrs.fields_dict(cls):
                setattr(opts, key, value)
            else:
                fields = [f.name for f in attrs.fields(cls) if f.name != "config"]
                raise InvalidOptionError(f"unknown session option {key!r}; use a 'session.*' config key or one of {fields!r}")
        return opts
