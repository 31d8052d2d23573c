"""The simulated GPU's own graph pass (003's Optimization surface): Conv + per-channel Add fused into Conv
with a bias, on the nodes it claimed (the session runs providers' passes after placement)."""

from __future__ import annotations

import ort_abi
import ort_graph

__all__ = ["ConvAddFusionSurface"]


class ConvAddFusionSurface:
    """A provider mixin: Conv + per-channel Add fused into Conv with a bias on the provider's own nodes."""

    def graph_passes(self) -> list[ort_abi.EpGraphPass]:
        return [ort_abi.EpGraphPass("ConvAddFusion", ort_graph.fuse_conv_add)]
