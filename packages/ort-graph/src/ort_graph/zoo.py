"""Generated models (public face of `_zoo`)."""

from ._zoo import (
    DEMO_CONFIG,
    DecoderConfig,
    decoder,
    decoder_inputs,
    decoder_proto,
    demo_decoder,
    write_decoder,
)
from ._zoo_control import early_exit_loop_proto, if_weights_proto, loop_proto, nested_proto, scan_proto
from ._zoo_genai import genai_decoder_inputs, genai_decoder_proto
from ._zoo_genai_tied import genai_tied_decoder_proto, quantize_blocks

__all__ = ["DEMO_CONFIG", "DecoderConfig", "decoder", "decoder_inputs", "decoder_proto", "demo_decoder",
           "genai_decoder_inputs", "genai_decoder_proto", "genai_tied_decoder_proto", "quantize_blocks", "write_decoder",
           "early_exit_loop_proto", "if_weights_proto", "loop_proto", "nested_proto", "scan_proto"]
