"""The CPU providers' own graph passes (003's Optimization surface), on the nodes each claimed (the session
runs providers' passes after placement): the CPU provider folds a per-channel constant Add after a ConvTranspose
into its bias (paddle2onnx's), then an inference BatchNormalization into the Conv or ConvTranspose before it
(constant per-channel inputs: new weights and bias, ONNX Runtime's ConvBNFusion), runs a 1-D Conv as a 2-D one
with H = 1 between two Reshapes (the C Conv kernel takes rank 4), drops an RNN / GRU / LSTM `activations`
attribute that spells out the defaults (the C recurrent kernels compute those only), runs an inference Dropout
whose mask no one reads as an Identity (a C copy: onnxruntime removes the node), folds a constant per-channel
or scalar Mul and Add after a Conv into it (ConvMulFusion, ConvAddFusion), then the activation after a Conv
into com.microsoft FusedConv (ConvActivationFusion: the ones the C Conv kernel applies in its epilogue where the C
kernels are loaded, every FusedConv activation otherwise; Tanh has no C epilogue), fuses SiLU,
Mul(x, Sigmoid(x)), into com.microsoft QuickGelu(alpha=1) with a one-pass kernel, and a MatMul reading a last-two-axes Transpose as B into FusedMatMul
(the attention's K^T: BLAS multiplies the transposed view, no transposed copy), and grouped-query attention's
materialized KV repeat (Unsqueeze/Expand/Reshape read by that matmul) into the group folded into the query rows
(no g-times-the-cache expanded block); the simulated GPU (a CPU provider) runs the same passes. A Level-1 SiLU
fusion would move the pair off CUDA (no CUDA kernel for QuickGelu): as an EP pass it only fuses what the CPU
provider already runs."""

from __future__ import annotations

import functools
from collections.abc import Collection

import ort_abi
import ort_graph

from . import _ckernels

__all__ = ["SiLUFusionSurface"]


def _c_epilogue(kind: str, params: list[float]) -> bool:
    """An activation a FusedConv may carry here: the C Conv's epilogue ones where the C kernels are loaded (else
    every one: the numpy FusedConv applies them all)."""
    return _ckernels.c_registry() is None or kind in _ckernels.C_CONV_ACTIVATIONS


def _conv_activation_fusion(graph: ort_graph.Graph, nodes: Collection[ort_graph.Node]) -> list[ort_graph.FusionRecord]:
    return ort_graph.fuse_conv_activation(graph, nodes, accepts=_c_epilogue)


def _conv_add_activation_fusion(graph: ort_graph.Graph,
                                nodes: Collection[ort_graph.Node]) -> list[ort_graph.FusionRecord]:
    return ort_graph.fuse_conv_add_activation(graph, nodes, accepts=_c_epilogue)


class SiLUFusionSurface:
    """A provider mixin: a per-channel Add into the ConvTranspose before it (ConvTransposeAddFusion),
    BatchNormalization folded into the Conv or ConvTranspose before it (ConvBNFusion), then a constant Mul and Add
    folded into the Conv before them (ConvMulFusion, ConvAddFusion), a residual Add and the activation after it
    (ConvAddActivationFusion) or the activation alone into FusedConv, Mul(x, Sigmoid(x))
    fused into QuickGelu(x, alpha=1), and MatMul(., Transpose(.)) into
    FusedMatMul, and the repeated KV heads a matmul reads into rows of the query (RepeatKVFusion), on the provider's
    own nodes."""

    def graph_passes(self) -> list[ort_abi.EpGraphPass]:
        return [ort_abi.EpGraphPass("ConvTransposeAddFusion", ort_graph.fuse_convtranspose_add),
                ort_abi.EpGraphPass("ConvBNFusion", ort_graph.fuse_conv_batchnorm),
                ort_abi.EpGraphPass("Conv1dAs2d", ort_graph.conv1d_as_conv2d),
                ort_abi.EpGraphPass("RecurrentDefaultActivations", ort_graph.drop_default_rnn_activations),
                ort_abi.EpGraphPass("InferenceDropoutAsIdentity", ort_graph.inference_dropout_as_identity),
                ort_abi.EpGraphPass("ConvMulFusion", ort_graph.fuse_conv_mul),
                ort_abi.EpGraphPass("ConvAddFusion", ort_graph.fuse_conv_add),
                ort_abi.EpGraphPass("ConvAddActivationFusion", _conv_add_activation_fusion),
                ort_abi.EpGraphPass("ConvActivationFusion", _conv_activation_fusion),
                ort_abi.EpGraphPass("SiLUFusion", ort_graph.fuse_silu),
                # B's Transpose only: the C MatMul takes transB, not transA (a transposed A stays Transpose +
                # MatMul, both C, not a numpy FusedMatMul: ppocrv4_rec's head)
                ort_abi.EpGraphPass("MatMulTransposeFusion",
                                    functools.partial(ort_graph.fuse_matmul_transpose, trans_a=False)),
                ort_abi.EpGraphPass("RepeatKVFusion", ort_graph.fuse_repeat_kv)]

