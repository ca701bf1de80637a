"""Adapters under tensor parallelism (gloo, two ranks): each rank holds its shard, the output is tp=1's."""

from __future__ import annotations

import multiprocessing

import torch

from tercet.model.tensor_parallel import TensorParallel
from tercet.plugins.torch_lora_backend import TorchLoraBackend
from tercet.testing import free_port
from tercet.testing.paged_greedy import PagedGreedyDriver
from tercet.testing.runner_factory import model_runner_for

PROMPTS = [[1, 504, 3458, 282, 4649, 314], [1, 9124, 2492, 253, 655, 28, 281, 253, 1789]]
ADAPTERS = ["every", None]
MAX_NEW_TOKENS = 6
JOIN_TIMEOUT = 300
OPTIONS = dict(dtype="float32", device="cpu", max_total_tokens=256, page_size=4)


def greedy_with_adapters(runner, adapter_path: str) -> list[list[int]]:
    runner.attach_lora(TorchLoraBackend(), max_rank=8).load("every", adapter_path)
    driver = PagedGreedyDriver(runner)
    sequences = [driver.start(prompt, adapter=adapter) for prompt, adapter in zip(PROMPTS, ADAPTERS)]
    for _ in range(MAX_NEW_TOKENS):
        driver.step(None, *sequences)
    return [sequence.output_ids for sequence in sequences]


def lora_rank(rank, size, port, model_path, adapter_path, results):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    try:
        runner = model_runner_for(model_path, tp=TensorParallel(rank, size), **OPTIONS)
        results.put((rank, greedy_with_adapters(runner, adapter_path)))
    except BaseException as error:
        results.put((rank, repr(error)))
        raise
    finally:
        dist.destroy_process_group()


def test_tp2_with_an_adapter_gives_the_output_of_tp1(tiny_llama_dir, tiny_adapters):
    expected = greedy_with_adapters(model_runner_for(tiny_llama_dir, **OPTIONS), tiny_adapters["every"])
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = free_port()
    ranks = [context.Process(target=lora_rank, args=(rank, 2, port, str(tiny_llama_dir), tiny_adapters["every"],
                                                     results)) for rank in range(2)]
    for process in ranks:
        process.start()
    try:
        answers = dict(results.get(timeout=JOIN_TIMEOUT) for _ in ranks)
    finally:
        for process in ranks:
            process.join(JOIN_TIMEOUT)
            if process.is_alive():
                process.kill()
    assert answers == {0: expected, 1: expected}
