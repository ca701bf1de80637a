"""The scheduler process, assembled in assembly.py: requests and their queues, KV memory and the prefix cache,
admission, the model step, policies, the control plane; grammar/: output constraints; speculative/: drafts.
May import: parallel, model, processes, ipc, tokenizer, metrics, config and the foundation modules."""
