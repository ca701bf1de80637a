"""Decode step time with tensor parallelism (tp_size=2) against one process, and the collectives' share.

    python3 benchmarks/tensor_parallel.py [--model PATH] [--batch-sizes 1 32] [--steps 20]

Each configuration runs on the same cores: one process with every thread, or
tp_size processes with an equal share of the threads each, joined by gloo on
this host. A step is one decode forward of the whole batch (prompts of 64
tokens prefilled first); the all-reduces and the logits' all-gather are timed
inside it. On a CPU machine with few cores TP does not pay: the figures show
what the communication costs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import statistics
import time

import torch

PROMPT_LEN = 64


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def timed_collectives():
    """Wrap torch.distributed's all_reduce and all_gather; the returned list collects their seconds."""
    import torch.distributed as dist

    spent: list[float] = []
    for name in ("all_reduce", "all_gather"):
        original = getattr(dist, name)

        def timed(*args, _original=original, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - start)

        setattr(dist, name, timed)
    return spent


def run_rank(rank: int, size: int, port: int, model: str, batch_sizes, steps: int, threads: int, results) -> None:
    torch.set_num_threads(threads)
    from tercet.model.tensor_parallel import SINGLE, TensorParallel
    from tercet.testing.runner_factory import model_runner_for
    from tercet.testing.paged_greedy import PagedGreedyDriver

    spent: list[float] = []
    tp = SINGLE
    if size > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
        spent = timed_collectives()
        tp = TensorParallel(rank, size)
    runner = model_runner_for(model, page_size=16, max_total_tokens=max(batch_sizes) * (PROMPT_LEN + steps + 32),
                              max_running_requests=max(batch_sizes), tp=tp)
    figures = {}
    for batch_size in batch_sizes:
        driver = PagedGreedyDriver(runner)
        sequences = [driver.start([(7 * i + j) % 1000 + 10 for j in range(PROMPT_LEN)]) for i in range(batch_size)]
        driver.step(None, *sequences)  # prefill
        step_times, collective_times = [], []
        for _ in range(steps):
            spent.clear()
            start = time.perf_counter()
            driver.step(None, *sequences)
            step_times.append(time.perf_counter() - start)
            collective_times.append(sum(spent))
        figures[batch_size] = (statistics.median(step_times), statistics.median(collective_times))
        for sequence in sequences:
            runner.page_allocator.free(sequence.pages)
            runner.req_to_token_pool.free(sequence.row)
    results.put((rank, figures))


def measure(size: int, model: str, batch_sizes, steps: int) -> dict:
    threads = max(1, (os.cpu_count() or 1) // size)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = free_port()
    ranks = [context.Process(target=run_rank, args=(rank, size, port, model, batch_sizes, steps, threads, results))
             for rank in range(size)]
    for process in ranks:
        process.start()
    answers = dict(results.get(timeout=1800) for _ in ranks)
    for process in ranks:
        process.join()
    return answers[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint directory or .gguf (default: the default model's GGUF)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--steps", type=int, default=20)
    arguments = parser.parse_args()
    model = arguments.model
    if model is None:
        from tercet.formats.default_model import find_default_gguf

        model = str(find_default_gguf())
    print(f"model {model}; {os.cpu_count()} cores; decode steps of prompts of {PROMPT_LEN} tokens")
    single = measure(1, model, arguments.batch_sizes, arguments.steps)
    split = measure(2, model, arguments.batch_sizes, arguments.steps)
    print("| batch | tp=1 step | tp=2 step | tp=2 / tp=1 | collectives in a tp=2 step |")
    print("|---|---|---|---|---|")
    for batch_size in arguments.batch_sizes:
        one, (two, collectives) = single[batch_size][0], split[batch_size]
        print(f"| {batch_size} | {one * 1e3:.1f} ms | {two * 1e3:.1f} ms | {two / one:.2f} | "
              f"{collectives * 1e3:.1f} ms ({collectives / two:.0%}) |")


if __name__ == "__main__":
    main()
