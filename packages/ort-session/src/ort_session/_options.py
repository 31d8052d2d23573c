"""Session options. Keys mirror ONNX Runtime's session config names where one exists."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from . import _option_checks as _check
from . import _ort_options as _ort
from ._errors import InvalidOptionError
from ._ort_options import ExecutionMode, GraphOptimizationLevel

LAYER_ASSIGNMENT = "session.layer_assignment_settings"
NAME_BASED_ASSIGNMENT = "session.name_based_layer_assignment"
PRE_ALLOCATE = "session.pre_allocate_execution_buffers"
CUDA_PARTITIONING = "session.resource_cuda_partitioning_settings"
MAX_SHAPE_OVERRIDE = "session.max_shape_override"
ALLOW_UNPLANNED_SHAPES = "session.allow_unplanned_shapes"  # budgets with symbolic dims left open: warn, not refuse
EXTERNAL_DATA_FOLDER = "session.model_external_initializers_file_folder_path"  # ONNX Runtime's key
DISABLE_CPU_EP_FALLBACK = "session.disable_cpu_ep_fallback"  # ONNX Runtime's: a declined node is an error
ORT_CONFIG_PREFIXES = ("session.", "optimization.", "ep.", "mlas.")  # key families: unread keys warn, others fail
# ONNX Runtime's key for the per-node memory statistics CSV; the same file as the `memory_profile_out` field
NODE_MEMORY_STATS_FILE = "session.collect_node_memory_stats_to_file"
# the seeds' keys (000/002): the static plan's buffers (activations + declared workspace, joined) allocated once
# at initialization with a counted dynamic fallback; and a kernel asking at run time for more workspace than it
# declared at Level 2 is an error at its node instead of a scratch fallback
STATIC_WORKSPACE = "session.enable_static_workspace_preallocation"
STRICT_WORKSPACE = "session.strict_workspace_verification"
# capture a device graph on the first run and replay it on later runs (ONNX Runtime's CUDA provider option
# `enable_cuda_graph`, session-wide here): needs pre-allocated buffers and a provider that can capture
GRAPH_CAPTURE = "session.enable_graph_capture"
WEIGHT_STREAMING = "session.weight_streaming"  # off | on | auto (default): see _streaming
WEIGHT_STREAMING_CPU = "session.weight_streaming_cpu_profile"  # "<FLOP/s>,<bytes/s>": the CPU's, instead of a probe
# a model given as a path: its large inline initializers (raw_data) are memory-mapped from the .onnx file
# instead of read into memory (on by default; "0": read them, as onnx.load does)
MAP_INLINE_WEIGHTS = "session.map_inline_weights"
KNOWN_CONFIG_KEYS = (LAYER_ASSIGNMENT, NAME_BASED_ASSIGNMENT, PRE_ALLOCATE, CUDA_PARTITIONING, MAX_SHAPE_OVERRIDE,
                     ALLOW_UNPLANNED_SHAPES, EXTERNAL_DATA_FOLDER, DISABLE_CPU_EP_FALLBACK,
                     NODE_MEMORY_STATS_FILE, STATIC_WORKSPACE, STRICT_WORKSPACE, GRAPH_CAPTURE, WEIGHT_STREAMING,
                     WEIGHT_STREAMING_CPU, MAP_INLINE_WEIGHTS)
BOOLEAN_KEYS = (PRE_ALLOCATE, ALLOW_UNPLANNED_SHAPES, DISABLE_CPU_EP_FALLBACK, STATIC_WORKSPACE, STRICT_WORKSPACE, GRAPH_CAPTURE,
                MAP_INLINE_WEIGHTS)


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


def cpu_profile(value: str) -> tuple[float, float]:
    """`session.weight_streaming_cpu_profile`: "<FLOP/s>,<bytes/s>" (e.g. "2e11,4e10"), both positive."""
    try:
        flops, bandwidth = (float(p) for p in str(value).split(","))
    except ValueError as e:
        raise InvalidOptionError(f"option {WEIGHT_STREAMING_CPU!r}={value!r} is not '<FLOP/s>,<bytes/s>'; give e.g. "
                                 "'2e11,4e10' (the CPU's compute and memory bandwidth), or leave it out to measure "
                                 "them") from e
    if not (flops > 0 and bandwidth > 0) or float("inf") in (flops, bandwidth):
        raise InvalidOptionError(f"option {WEIGHT_STREAMING_CPU!r}={value!r}: both numbers must be positive and "
                                 "finite, e.g. '2e11,4e10'")
    return flops, bandwidth


@attrs.define
class SessionOptions(_ort.OrtSessionOptionMethods):
    """Everything a session needs to know before loading.

    `config` holds ONNX Runtime-style string entries (`session.layer_assignment_settings`, ...);
    the typed fields are this project's additions (budgets, dimension overrides, kernel libraries);
    the keyword-only fields at the end are ONNX Runtime's SessionOptions attributes (`_ort_options`
    says which are honoured and which are accepted with an `OrtOptionNoteWarning`).
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
    # threads of the CPU kernels and of BLAS while a run lasts (ONNX Runtime's name; 0: the physical cores)
    intra_op_num_threads: int = attrs.field(default=0, converter=_check.thread_count)
    # write per-node memory CSV (ONNX Runtime's stats format)
    memory_profile_out: str | None = attrs.field(default=None,
                                                 converter=_check.optional_str("memory_profile_out", path=True))
    # count the numpy data buffers kernels allocate during each run, per node: `last_run_stats.traced_bytes`,
    # `traced_nodes`, `traced_by` (the counting numpy allocator; tracemalloc, slow, where it is not built)
    measure_host_allocations: bool = attrs.field(default=False, converter=_check.boolean("measure_host_allocations"))
    # -- ONNX Runtime's SessionOptions attributes (keyword-only) --
    graph_optimization_level: GraphOptimizationLevel = attrs.field(
        default=GraphOptimizationLevel.ORT_ENABLE_ALL, kw_only=True,
        converter=_ort.enum_option("graph_optimization_level", GraphOptimizationLevel))
    inter_op_num_threads: int = attrs.field(default=0, kw_only=True,
                                            converter=_ort.count_option("inter_op_num_threads", 0, 4096, _ort.NO_POOL))
    execution_mode: ExecutionMode = attrs.field(default=ExecutionMode.ORT_SEQUENTIAL, kw_only=True,
                                                converter=_ort.enum_option("execution_mode", ExecutionMode))
    enable_mem_pattern: bool = attrs.field(default=True, kw_only=True,
                                           converter=_ort.flag_option("enable_mem_pattern", True, _ort.NO_ARENA))
    enable_mem_reuse: bool = attrs.field(default=True, kw_only=True,
                                         converter=_ort.flag_option("enable_mem_reuse", True, _ort.NO_ARENA))
    enable_cpu_mem_arena: bool = attrs.field(default=True, kw_only=True,
                                             converter=_ort.flag_option("enable_cpu_mem_arena", True))
    log_severity_level: int = attrs.field(default=2, kw_only=True,
                                          converter=_ort.count_option("log_severity_level", 2, 4, _ort.NO_LOG))
    log_verbosity_level: int = attrs.field(default=0, kw_only=True,
                                           converter=_ort.count_option("log_verbosity_level", 0, 1000, _ort.NO_LOG))
    logid: str = attrs.field(default="", kw_only=True, converter=_ort.text_option("logid"))
    use_deterministic_compute: bool = attrs.field(default=False, kw_only=True, converter=_ort.flag_option(
        "use_deterministic_compute", False, _ort.DETERMINISTIC))
    optimized_model_filepath: str = attrs.field(default="", kw_only=True,  # the model after fusions is saved there
                                                converter=_ort.text_option("optimized_model_filepath"))
    enable_profiling: bool = attrs.field(default=False, kw_only=True, converter=_ort.flag_option("enable_profiling", False))
    profile_file_prefix: str = attrs.field(default="onnxruntime_profile_", kw_only=True,
                                           converter=_ort.text_option("profile_file_prefix"))
    initializer_overrides: dict[str, Any] = attrs.field(factory=dict, kw_only=True,
                                                        converter=_ort.initializer_overrides)
    # providers=[(name, {...})] / provider_options=[{...}], checked by the session (`_ort_api`)
    provider_options: dict[str, dict[str, str]] = attrs.field(factory=dict, kw_only=True)

    def add_session_config_entry(self, key: str, value: str) -> None:
        key = _check.config_key(key)
        value = _check.config_value(key, value)
        if not key.startswith(ORT_CONFIG_PREFIXES):
            raise InvalidOptionError(f"config key {key!r} must start with one of {ORT_CONFIG_PREFIXES!r} (ONNX Runtime's "
                                     f"config key families); the keys ort-session reads: {KNOWN_CONFIG_KEYS!r}")
        if key not in KNOWN_CONFIG_KEYS:  # ONNX Runtime has many more keys: accepted, but a typo must not pass silently
            import difflib
            import warnings

            close = difflib.get_close_matches(key, KNOWN_CONFIG_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; the keys it reads are {list(KNOWN_CONFIG_KEYS)!r}"
            warnings.warn(f"session config key {key!r} is not read by ort-session and has no effect{hint}",
                          UnknownConfigKeyWarning, stacklevel=3)
        if key in BOOLEAN_KEYS:
            _truthy(value, key)
        elif key == MAX_SHAPE_OVERRIDE:
            _check.max_shapes(value, option=key)
        elif key == WEIGHT_STREAMING and str(value).strip().lower() not in ("off", "on", "auto"):
            raise InvalidOptionError(f"option {key!r}={value!r} is not one of 'off', 'on', 'auto'; use 'off' (no "
                                     "streaming), 'on' (stream every layer that does not fit resident) or 'auto' "
                                     "(the cost model decides)")
        elif key == WEIGHT_STREAMING_CPU:
            cpu_profile(value)
        self.config[key] = value

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.config.get(key, default)

    @property
    def pre_allocate(self) -> bool:
        return _truthy(self.config.get(PRE_ALLOCATE, "0"), PRE_ALLOCATE)

    @property
    def map_inline_weights(self) -> bool:
        """`session.map_inline_weights` (unset: on)."""
        return _truthy(self.config.get(MAP_INLINE_WEIGHTS, "1"), MAP_INLINE_WEIGHTS)

    def flag(self, key: str) -> bool:
        """A boolean `session.*` key (unset: off)."""
        return _truthy(self.config.get(key, "0"), key)

    @property
    def memory_stats_file(self) -> str | None:
        """Where the per-node memory statistics CSV goes: `memory_profile_out` or ONNX Runtime's
        `session.collect_node_memory_stats_to_file` (one file; two different paths are refused)."""
        ours, ort_key = self.memory_profile_out, self.config.get(NODE_MEMORY_STATS_FILE) or None
        if ours and ort_key and ours != ort_key:
            raise InvalidOptionError(
                f"memory_profile_out={ours!r} and {NODE_MEMORY_STATS_FILE}={ort_key!r} name two different files for "
                "the same per-node memory statistics; set one of them")
        return ours or ort_key

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
