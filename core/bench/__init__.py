"""Benchmarks of a running server and of tercet's own parts.

``tercet bench`` (:mod:`tercet.bench.serving`) measures any OpenAI-compatible
server from the outside: synthetic prompts of an exact token length
(:mod:`~tercet.bench.workload`) sent as streamed completions
(:mod:`~tercet.bench.streaming_client`) at a fixed concurrency or a Poisson
rate (:mod:`~tercet.bench.arrivals`), summarised as throughput and latency
percentiles (:mod:`~tercet.bench.summary`, :mod:`~tercet.bench.report`).
``tercet bench-offline`` and ``bench-ipc`` time the engine in-process and the IPC fabric.

May import: scheduler, processes, tokenizer, formats, config and the foundation modules.
"""

from tercet.errors import TercetError


class BenchError(TercetError):
    """A benchmark cannot run (server unreachable, no model, bad tokenizer); said without a traceback."""
