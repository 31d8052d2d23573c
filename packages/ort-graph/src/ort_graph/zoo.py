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

__all__ = ["DEMO_CONFIG", "DecoderConfig", "decoder", "decoder_inputs", "decoder_proto", "demo_decoder", "write_decoder"]
