"""The scheduler process: requests, KV memory, batching and the model loop."""
