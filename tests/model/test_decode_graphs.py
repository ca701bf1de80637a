"""Decode graphs: buckets, static inputs, padding and replay, checked on the CPU with a stand-in
capturer that runs the captured step again at each replay; on CUDA (the cuda lane), real graphs
give the eager greedy tokens."""

from __future__ import annotations

import logging

import pytest

from tercet.model.decode_graphs import CapturedGraph, bucket_sizes
from tercet.testing.paged_greedy import PagedGreedyDriver, greedy_tokens
from tercet.testing.runner_factory import installed_model_components, model_runner_for

PROMPTS = [[5, 6, 7], list(range(20, 45)), [9] * 11, [30, 31], list(range(100, 117)), [3], [44] * 6]


class ReplaysByRunningAgain:
    """Stands in for CUDA graph capture: replay reruns the step and writes its result into the captured output."""

    def __init__(self):
        self.captured = 0
        self.replayed = 0

    def capture(self, step):
        self.captured += 1
        output = step()

        def replay():
            self.replayed += 1
            output.copy_(step())

        return CapturedGraph(replay, output)


@pytest.mark.parametrize(("max_batch", "buckets"), [
    (1, (1,)), (3, (1, 2, 3)), (8, (1, 2, 4, 8)), (20, (1, 2, 4, 8, 16, 20)), (32, (1, 2, 4, 8, 16, 24, 32)),
])
def test_buckets_are_powers_of_two_then_multiples_of_eight_up_to_the_cap(max_batch, buckets):
    assert bucket_sizes(max_batch) == buckets


@pytest.fixture
def graphed_runner(tiny_llama_dir, caplog):
    with caplog.at_level(logging.WARNING):
        runner = model_runner_for(tiny_llama_dir, dtype="float32", cuda_graph_max_batch=6)
    assert "CUDA graphs need CUDA" in caplog.text and not runner.decode_graphs.graphs
    capturer = ReplaysByRunningAgain()
    runner.decode_graphs.capture(capturer)
    return runner, capturer


def test_replayed_decode_steps_give_the_eager_tokens(graphed_runner, tiny_llama_dir):
    runner, capturer = graphed_runner
    assert capturer.captured == 4  # buckets 1, 2, 4, 6
    eager = model_runner_for(tiny_llama_dir, dtype="float32")
    assert eager.decode_graphs is None
    # 7 sequences: past the largest bucket (eager), then 5, 3 and 1 of them (buckets 6, 4 and 1).
    for prompts in (PROMPTS, PROMPTS[:5], PROMPTS[2:5], PROMPTS[6:]):
        replayed_before = capturer.replayed
        assert greedy_tokens(runner, prompts, 6) == greedy_tokens(eager, prompts, 6)
        free_pages_before = runner.page_allocator.num_free
        assert capturer.replayed - replayed_before == (0 if len(prompts) > 6 else 5)  # every step but the prefill
        assert free_pages_before == runner.page_allocator.num_free


def test_padding_rows_write_only_the_scratch_slot(graphed_runner):
    runner, _ = graphed_runner
    driver = PagedGreedyDriver(runner)
    sequences = [driver.start(prompt) for prompt in PROMPTS[:4]]
    driver.step(None, *sequences)  # the prefill, eager
    driver.step(None, *sequences)  # 4 sequences fill the bucket of 4
    scratch = runner.decode_graphs.scratch_slot
    assert scratch == runner.num_pages * runner.page_size  # past every page the allocator hands out
    # The captures wrote a padding row's K there already, and a batch-invariant kernel writes the same bits again:
    # a value no step computes makes the padding row's write visible.
    for buffer in runner.kv_cache.k_buffers:
        buffer[scratch] = 1234.5
    before = [buffer.clone() for buffer in runner.kv_cache.k_buffers]
    # 3 of them in the same bucket: the fourth row is padding now, and must not write where its sequence's K/V went.
    driver.step(None, *sequences[:3])
    rows, positions = [s.row for s in sequences[:3]], [s.num_cached - 1 for s in sequences[:3]]
    written = set(runner.req_to_token_pool.table[rows, positions].tolist())
    for old, new in zip(before, runner.kv_cache.k_buffers):
        changed = set((old != new).any(dim=(1, 2)).nonzero().flatten().tolist())
        assert changed == written | {scratch}


def test_steps_with_prompt_tokens_and_oversized_batches_run_eagerly(graphed_runner):
    runner, capturer = graphed_runner
    graphs = runner.decode_graphs
    prefill = runner.build_batch([0, 1], [0, 0], [[1, 2, 3], [4]])
    assert graphs.bucket_for(prefill) is None and graphs.replay(prefill) is None
    oversized = runner.build_batch(list(range(7)), [0] * 7, [[1]] * 7)
    assert graphs.bucket_for(oversized) is None and graphs.replay(oversized) is None
    assert capturer.replayed == 0


@pytest.mark.cuda
def test_on_cuda_captured_graphs_give_the_eager_tokens(tiny_llama_dir):
    settings = {"dtype": "float32", "device": "cuda", "components": installed_model_components("triton")}
    graphed = model_runner_for(tiny_llama_dir, cuda_graph_max_batch=8, **settings)
    assert sorted(graphed.decode_graphs.graphs) == [1, 2, 4, 8]
    eager = model_runner_for(tiny_llama_dir, **settings)
    for prompts in (PROMPTS, PROMPTS[:3]):
        assert greedy_tokens(graphed, prompts, 8) == greedy_tokens(eager, prompts, 8)
