"""ort-partition: layer rules, memory budgets, placement and auto-fit for ONNX graphs.

    rules = parse_rules("cuda(layers.[0-15]/); cpu(layers.[16-31]/)")
    index = assign_layers(graph, name_rules=rules, available_eps=["CUDAExecutionProvider", "CPUExecutionProvider"])
    placement = place(graph, [cuda_ep, "CPUExecutionProvider"], layering=index, budgets="cuda:6GiB")
    print(PlacementReport.from_placement(placement).table())

or by budget alone: `auto_fit(graph, [cuda_ep, "CPUExecutionProvider"], "cuda:6GiB")`.
"""

from typing import TYPE_CHECKING

from ort_graph._lazy import lazy_exports

__version__ = "0.2.0"

_WHERE = {
    "bench": ".bench",
    "WORKSPACE_HEURISTIC": "._accounting",
    "NodeCost": "._accounting",
    "ResourceAccountant": "._accounting",
    "WorkspaceEstimator": "._accounting",
    "apply_workspace_heuristic": "._accounting",
    "node_cost_breakdown": "._accounting",
    "node_cost_for_budget": "._accounting",
    "safe_estimate": "._accounting",
    "AutoFitResult": "._autofit",
    "auto_fit": "._autofit",
    "RESOURCE_CUDA_PARTITIONING_KEY": "._budget",
    "STATS_HEADER": "._budget",
    "Budgets": "._budget",
    "NodeAllocationStats": "._budget",
    "NodeStats": "._budget",
    "NodeStatsRecorder": "._budget",
    "ResourcePartitioningSettings": "._budget",
    "Share": "._budget",
    "format_node_stats": "._budget",
    "parse_budget": "._budget",
    "parse_resource_partitioning_settings": "._budget",
    "read_node_stats": "._budget",
    "write_node_stats": "._budget",
    "Claim": "._claims",
    "Declined": "._claims",
    "ExecutionProviderSpec": "._claims",
    "OpSetProvider": "._claims",
    "PluginAdapter": "._claims",
    "PluginProviderSpec": "._claims",
    "Supported": "._claims",
    "CPU": "._costmodel",
    "RESIDENT": "._costmodel",
    "SIMULATED_DEVICE": "._costmodel",
    "STREAMED": "._costmodel",
    "CpuProfile": "._costmodel",
    "DeviceSpeeds": "._costmodel",
    "LayerWork": "._costmodel",
    "choose_layers": "._costmodel",
    "device_speeds": "._costmodel",
    "layer_work": "._costmodel",
    "measure_cpu_profile": "._costmodel",
    "run_time": "._costmodel",
    "CPU_EP": "._devices",
    "CUDA_EP": "._devices",
    "EpInfo": "._devices",
    "ep_info": "._devices",
    "match_device": "._devices",
    "BudgetError": "._errors",
    "BudgetOverrunWarning": "._errors",
    "PartitionError": "._errors",
    "PlacementError": "._errors",
    "RuleDroppedWarning": "._errors",
    "RuleError": "._errors",
    "RuleSyntaxError": "._errors",
    "RuleUnmatchedWarning": "._errors",
    "StatsFileError": "._errors",
    "UnknownProfileError": "._errors",
    "WorkspaceEstimateWarning": "._errors",
    "LAYER_ASSIGNMENT_KEY": "._layering",
    "NAME_LAYER_ASSIGNMENT_KEY": "._layering",
    "LayeringIndex": "._layering",
    "assign_layers": "._layering",
    "assign_layers_from_options": "._layering",
    "FINAL_NORM": "._layers",
    "group_label": "._layers",
    "group_of": "._layers",
    "layer_groups": "._layers",
    "layer_id": "._layers",
    "node_group": "._layers",
    "BudgetStop": "._loops",
    "CapabilityResult": "._loops",
    "host_loop": "._loops",
    "in_tree_loop": "._loops",
    "run_capability": "._loops",
    "AnnotationMatcher": "._matchers",
    "NameMatcher": "._matchers",
    "derived_node_path": "._matchers",
    "name_match_target": "._matchers",
    "Placement": "._placement",
    "place": "._placement",
    "PROFILES": "._profiles",
    "DeviceProfile": "._profiles",
    "get_profile": "._profiles",
    "profile_names": "._profiles",
    "Overrun": "._recheck",
    "RecheckResult": "._recheck",
    "recheck_budget": "._recheck",
    "DeviceTotals": "._report",
    "PlacementReport": "._report",
    "ReportRow": "._report",
    "declines_by_reason": "._report",
    "placement_report": "._report",
    "Rule": "._rules",
    "Rules": "._rules",
    "parse_rules": "._rules",
    "FitCheck": "._search",
    "format_bytes": "._units",
    "parse_bytes": "._units",
    "closest_names": "._unmatched",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)

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


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from . import bench  # noqa: F401
    from ._accounting import (  # noqa: F401
        WORKSPACE_HEURISTIC,
        NodeCost,
        ResourceAccountant,
        WorkspaceEstimator,
        apply_workspace_heuristic,
        node_cost_breakdown,
        node_cost_for_budget,
        safe_estimate,
    )
    from ._autofit import AutoFitResult, auto_fit  # noqa: F401
    from ._budget import (  # noqa: F401
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
    from ._claims import (  # noqa: F401
        Claim,
        Declined,
        ExecutionProviderSpec,
        OpSetProvider,
        PluginAdapter,
        PluginProviderSpec,
        Supported,
    )
    from ._costmodel import (  # noqa: F401
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
    from ._devices import CPU_EP, CUDA_EP, EpInfo, ep_info, match_device  # noqa: F401
    from ._errors import (  # noqa: F401
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
    from ._layering import (  # noqa: F401
        LAYER_ASSIGNMENT_KEY,
        NAME_LAYER_ASSIGNMENT_KEY,
        LayeringIndex,
        assign_layers,
        assign_layers_from_options,
    )
    from ._layers import FINAL_NORM, group_label, group_of, layer_groups, layer_id, node_group  # noqa: F401
    from ._loops import BudgetStop, CapabilityResult, host_loop, in_tree_loop, run_capability  # noqa: F401
    from ._matchers import AnnotationMatcher, NameMatcher, derived_node_path, name_match_target  # noqa: F401
    from ._placement import Placement, place  # noqa: F401
    from ._profiles import PROFILES, DeviceProfile, get_profile, profile_names  # noqa: F401
    from ._recheck import Overrun, RecheckResult, recheck_budget  # noqa: F401
    from ._report import DeviceTotals, PlacementReport, ReportRow, declines_by_reason, placement_report  # noqa: F401
    from ._rules import Rule, Rules, parse_rules  # noqa: F401
    from ._search import FitCheck  # noqa: F401
    from ._units import format_bytes, parse_bytes  # noqa: F401
    from ._unmatched import closest_names  # noqa: F401
