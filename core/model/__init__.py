"""The lean model side: paged KV cache, forward batches, attention backends, Llama, sampling."""
