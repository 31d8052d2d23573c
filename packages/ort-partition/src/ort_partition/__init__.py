"""ort-partition: layer rules, memory budgets, placement and auto-fit for ONNX graphs.

    rules = parse_rules("cuda(layers.[0-15]/); cpu(layers.[16-31]/)")
    index = assign_layers(graph, name_rules=rules, available_eps=["CUDAExecutionProvider", "CPUExecutionProvider"])
    placement = place(graph, [cuda_ep, "CPUExecutionProvider"], layering=index, budgets="cuda:6GiB")
    print(PlacementReport.from_placement(placement).table())

or by budget alone: `auto_fit(graph, [cuda_ep, "CPUExecutionProvider"], "cuda:6GiB")`.
"""

from . import bench
from ._accounting import (
    WORKSPACE_HEURISTIC,
    NodeCost,
    ResourceAccountant,
    WorkspaceEstimator,
    apply_workspace_heuristic,
    node_cost_breakdown,
    node_cost_for_budget,
    safe_estimate,
)
from ._autofit import AutoFitResult, auto_fit
from ._budget import (
    RESOURCE_CUDA_PARTITIONING_KEY,
    STATS_HEADER,
    Budgets,
    NodeAllocationStats,
    NodeStats,
    NodeStatsRecorder,
    ResourcePartitioningSettings,
    Share,
    format_node_stats,
    parse_budget,
    parse_resource_partitioning_settings,
    read_node_stats,
    write_node_stats,
)
from ._claims import (
    Claim,
    Declined,
    ExecutionProviderSpec,
    OpSetProvider,
    PluginAdapter,
    PluginProviderSpec,
    Supported,
)
from ._costmodel import (
    CPU,
    RESIDENT,
    SIMULATED_DEVICE,
    STREAMED,
    CpuProfile,
    DeviceSpeeds,
    LayerWork,
    choose_layers,
    device_speeds,
    layer_work,
    measure_cpu_profile,
    run_time,
)
from ._devices import CPU_EP, CUDA_EP, EpInfo, ep_info, match_device
from ._errors import (
    BudgetError,
    BudgetOverrunWarning,
    PartitionError,
    PlacementError,
    RuleDroppedWarning,
    RuleError,
    RuleSyntaxError,
    RuleUnmatchedWarning,
    StatsFileError,
    UnknownProfileError,
    WorkspaceEstimateWarning,
)
from ._layering import (
    LAYER_ASSIGNMENT_KEY,
    NAME_LAYER_ASSIGNMENT_KEY,
    LayeringIndex,
    assign_layers,
    assign_layers_from_options,
)
from ._layers import FINAL_NORM, group_label, group_of, layer_groups, layer_id, node_group
from ._loops import BudgetStop, CapabilityResult, host_loop, in_tree_loop, run_capability
from ._matchers import AnnotationMatcher, NameMatcher, derived_node_path, name_match_target
from ._placement import Placement, place
from ._profiles import PROFILES, DeviceProfile, get_profile, profile_names
from ._recheck import Overrun, RecheckResult, recheck_budget
from ._report import DeviceTotals, PlacementReport, ReportRow, declines_by_reason, placement_report
from ._rules import Rule, Rules, parse_rules
from ._search import FitCheck
from ._units import format_bytes, parse_bytes
from ._unmatched import closest_names

__version__ = "0.2.0"

__all__ = [
    "CPU", "RESIDENT", "SIMULATED_DEVICE", "STREAMED", "CpuProfile", "DeviceSpeeds", "LayerWork", "choose_layers",
    "device_speeds", "layer_work", "measure_cpu_profile", "run_time",
    "CPU_EP", "CUDA_EP", "FINAL_NORM", "PROFILES", "DeviceProfile", "UnknownProfileError", "get_profile",
    "profile_names", "LAYER_ASSIGNMENT_KEY", "NAME_LAYER_ASSIGNMENT_KEY",
    "RESOURCE_CUDA_PARTITIONING_KEY", "STATS_HEADER", "WORKSPACE_HEURISTIC",
    "AnnotationMatcher", "AutoFitResult", "BudgetError", "FitCheck", "BudgetOverrunWarning", "BudgetStop", "Budgets", "Share",
    "CapabilityResult", "Claim", "Declined", "DeviceTotals", "EpInfo", "ExecutionProviderSpec", "LayeringIndex",
    "NameMatcher", "NodeAllocationStats", "NodeCost", "NodeStats", "NodeStatsRecorder", "OpSetProvider", "Overrun",
    "PartitionError", "Placement", "PlacementError", "PlacementReport", "PluginAdapter", "PluginProviderSpec",
    "RecheckResult", "ReportRow", "ResourceAccountant", "ResourcePartitioningSettings", "Rule", "RuleDroppedWarning",
    "RuleError", "RuleSyntaxError", "RuleUnmatchedWarning", "Rules", "StatsFileError", "Supported", "WorkspaceEstimateWarning",
    "WorkspaceEstimator", "__version__",
    "apply_workspace_heuristic", "assign_layers", "declines_by_reason", "assign_layers_from_options", "auto_fit", "bench", "closest_names",
    "derived_node_path", "ep_info", "format_bytes", "format_node_stats", "group_label", "group_of", "host_loop",
    "in_tree_loop", "layer_groups", "layer_id", "match_device", "name_match_target", "node_cost_breakdown",
    "node_cost_for_budget", "node_group", "parse_budget", "parse_bytes", "parse_resource_partitioning_settings",
    "parse_rules", "place", "placement_report", "read_node_stats", "recheck_budget", "run_capability", "safe_estimate",
    "write_node_stats",
]
