"""The layers behind the built-in linear methods (dense_linear, int8_linear, gguf_block_linear):
dense and oneDNN-packed bfloat16, int8 per channel, GGUF block formats run from their codes.
Imports tercet.plugin_api only; it imports torch, so the hook modules import it lazily."""
