"""The scheduler process: requests and their queues, KV memory and the prefix cache, admission,
the model step, grammars (and the grammar-backend contract), scheduling policies, the control plane.
May import: parallel, model, processes, ipc, tokenizer, metrics, config and the foundation modules."""
