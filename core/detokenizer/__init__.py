"""The DetokenizerManager process: token ids in, text deltas out, stop strings trimmed and held back.

Strategies (incremental, DecodeStream) are plugins; this folder runs the chosen one for each request.
May import: processes, ipc, tokenizer, metrics and the foundation modules."""
