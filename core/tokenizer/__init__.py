"""The tokenizer, without torch or transformers: loaded from a checkpoint directory or a GGUF's
metadata (converted ones cached), the byte-level alphabet, the sandboxed chat template.
May import: formats and the foundation modules. The API and detokenizer processes use it."""
