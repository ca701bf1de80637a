"""Speculative decoding: the proposer contract, adding drafts to a step's feeds and verifying them, drafting
with a second model in its own KV pool. May import: grammar/ (the drafts a constraint allows), req, row_sampling,
kv_memory, model, processes, config and the foundation modules; never the scheduler's loop or its assembly."""
