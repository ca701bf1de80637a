"""What gathering the /metrics figures costs, against a decode step of the default model.

    python3 benchmarks/metrics_overhead.py [--batch-size 32] [--steps 20]

The scheduler's only new work is one queue-time observation when a request is
first admitted (none per decode step); the API process, another process,
observes each output piece (its latency histograms and token counters). Both
are timed here per call, and set beside one decode step of ``--batch-size``
requests: the API process's work for one step's outputs, as a share of the
step, is what it would add if it ran on the scheduler's core.
"""

from __future__ import annotations

import argparse
import statistics
import time

from tercet.ipc.messages import FinishReason
from tercet.metrics.latency_histogram import LatencyHistogram
from tercet.metrics.serving_metrics import ServingMetrics

CALLS = 100_000


def per_call_seconds(function, calls: int = CALLS) -> float:
    start = time.perf_counter()
    for index in range(calls):
        function(index)
    return (time.perf_counter() - start) / calls


def decode_step_seconds(batch_size: int, steps: int) -> float:
    from tercet.formats.default_model import find_default_gguf
    from tercet.testing.runner_factory import model_runner_for
    from tercet.testing.paged_greedy import PagedGreedyDriver

    runner = model_runner_for(find_default_gguf(), page_size=16, max_total_tokens=batch_size * 128,
                              max_running_requests=batch_size)
    driver = PagedGreedyDriver(runner)
    sequences = [driver.start([(5 * i + j) % 1000 + 10 for j in range(32)]) for i in range(batch_size)]
    driver.step(None, *sequences)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        driver.step(None, *sequences)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    arguments = parser.parse_args()

    histogram = LatencyHistogram()
    observe = per_call_seconds(lambda index: histogram.observe(index * 1e-6))
    metrics = ServingMetrics("bench")
    rids = [f"r{index}" for index in range(CALLS)]
    for rid in rids:
        metrics.started(rid, 0)
    metrics.output("r0", 1, 8, None)  # past the first token: the cheaper path is not what is timed
    length = FinishReason("length")
    piece = per_call_seconds(lambda index: metrics.output(rids[index], 1, 8, None if index % 16 else length))
    step = decode_step_seconds(arguments.batch_size, arguments.steps)
    outputs = arguments.batch_size * piece
    print(f"queue-time observation (scheduler, once per request at admission): {observe * 1e6:.2f} µs")
    print(f"output observation (API process, per piece): {piece * 1e6:.2f} µs")
    print(f"decode step at batch {arguments.batch_size}: {step * 1e3:.2f} ms; the API process's observations of "
          f"its {arguments.batch_size} outputs: {outputs * 1e3:.3f} ms ({outputs / step:.2%} of the step)")


if __name__ == "__main__":
    main()
