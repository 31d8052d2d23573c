"""Execution providers' own graph passes (003's Optimization surface), run after placement on the nodes
each provider claimed; the Level-2 re-check and the memory plan then see their result (the fused nodes'
kernels declare their workspace like any other)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ort_abi
import ort_graph
from ort_graph import Graph

from ._errors import PlacementError

__all__ = ["ep_passes_enabled", "run_ep_passes"]


def run_ep_passes(graph: Graph, providers: Sequence[Any]) -> list[Any]:
    """Each provider's passes over its claimed nodes, in provider order; the nodes a pass creates are placed
    on that provider, which must claim them (else PlacementError naming the pass and the node)."""
    records: list[Any] = []
    for provider in providers:
        if not isinstance(provider, ort_abi.GraphPassProvider):
            continue
        for gpass in provider.graph_passes():
            before = {id(n) for n in graph.nodes}
            done = list(gpass.apply(graph, [n for n in graph.nodes if n.ep == provider.name]))
            for node in graph.nodes:
                if id(node) in before:
                    continue
                node.ep = provider.name
                claim = provider.claim(node)
                if not getattr(claim, "supported", False):
                    raise PlacementError(
                        f"{provider.name}'s graph pass {gpass.name!r} created node {node.name!r} ({node.qualified_op}), "
                        f"which {provider.name} does not claim: {claim}; the pass must only create nodes its provider "
                        "runs (a provider bug: report it, or run without that provider)")
            records += done
    if records:
        ort_graph.remove_unused_initializers(graph)
    return records


def ep_passes_enabled(options: Any) -> bool:
    """Providers' passes run when fusions do (`enable_fusions`, and not ONNX Runtime's ORT_DISABLE_ALL)."""
    from ._ort_options import GraphOptimizationLevel

    return bool(options.enable_fusions) and options.graph_optimization_level != GraphOptimizationLevel.ORT_DISABLE_ALL
