"""Attribute types of the com.microsoft (contrib) operators this project runs, as onnxruntime's schemas
declare them (onnx.defs knows no contrib schema). A model whose contrib node carries an attribute of
another type is refused at load, as a standard operator's is (a test keeps this table equal to
onnxruntime's `get_all_operator_schema()`)."""

from __future__ import annotations

from onnx import AttributeProto

_I, _F, _S = AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING

CONTRIB_ATTRIBUTE_TYPES: dict[tuple[str, str], dict[str, int]] = {
    ("com.microsoft", "GroupQueryAttention"): {
        "num_heads": _I, "kv_num_heads": _I, "scale": _F, "softcap": _F, "do_rotary": _I, "rotary_interleaved": _I,
        "local_window_size": _I, "smooth_softmax": _I, "qk_output": _I, "causal": _I, "sliding_window_cache": _I,
        "kv_cache_bit_width": _I, "k_quant_type": _S, "v_quant_type": _S, "q_norm_epsilon": _F, "k_norm_epsilon": _F,
        "qk_norm_epsilon": _F},
    ("com.microsoft", "RotaryEmbedding"): {"num_heads": _I, "rotary_embedding_dim": _I, "interleaved": _I,
                                           "is_packed_batching": _I, "scale": _F},
    ("com.microsoft", "MultiHeadAttention"): {"num_heads": _I, "unidirectional": _I, "scale": _F,
                                              "mask_filter_value": _F},
    ("com.microsoft", "MatMulNBits"): {"K": _I, "N": _I, "bits": _I, "block_size": _I, "accuracy_level": _I,
                                       "weight_prepacked": _I},
    ("com.microsoft", "SkipSimplifiedLayerNormalization"): {"epsilon": _F},
    ("com.microsoft", "SkipLayerNormalization"): {"epsilon": _F},
    ("com.microsoft", "FusedMatMul"): {"alpha": _F, "transA": _I, "transB": _I, "transBatchA": _I, "transBatchB": _I},
    ("com.microsoft", "QuickGelu"): {"alpha": _F},
    ("com.microsoft", "FusedConv"): {"auto_pad": _S, "kernel_shape": AttributeProto.INTS, "dilations": AttributeProto.INTS,
                                     "strides": AttributeProto.INTS, "pads": AttributeProto.INTS, "group": _I,
                                     "activation": _S, "activation_params": AttributeProto.FLOATS},
    ("", "SimplifiedLayerNormalization"): {"axis": _I, "epsilon": _F, "stash_type": _I},
}
