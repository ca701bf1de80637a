"""Output constraints in the scheduler: the grammar-backend contract, compiling off the loop (a pool, a cache,
closed JSON objects), masking a step's constrained rows, the drafts a constraint allows. May import: req,
request_queues, model, reasoning, ipc, the foundation modules; never speculative/, the loop or its assembly."""
