"""The control plane's routes, SGLang's: flush the cache, server info, abort, pause and resume, new
weights; torch profiles on every rank; and LoRA adapters: loaded, unloaded, listed, and which adapter
a request names (which the generating routes ask here).

May import: http's top level, frontend and below.
"""
