"""Tensor parallelism on torch.distributed (gloo): each rank holds its shard, and
float32 greedy output with tp_size=2 equals tp_size=1 token for token."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from tercet.errors import ConfigError
from tercet.formats.gguf_blocks import BlockQuantized, quantize_blocks
from tercet.model.llama import LlamaShape
from tercet.model.tensor_parallel import LlamaShards, TensorParallel
from tercet.testing import free_port
from tercet.testing.runner_factory import model_runner_for
from tercet.testing.paged_greedy import greedy_tokens

PROMPTS = [[1, 2, 3, 4, 5], [100, 200, 300], [7] * 11]
MAX_NEW_TOKENS = 8
JOIN_TIMEOUT = 600  # generous: two ranks load a model each on a busy 2-core machine


def shape(num_heads=4, num_kv_heads=2, intermediate_size=128, vocab_size=10) -> LlamaShape:
    return LlamaShape(vocab_size=vocab_size, hidden_size=64, intermediate_size=intermediate_size, num_layers=1,
                      num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=16, rms_norm_eps=1e-5,
                      max_position_embeddings=64, tie_word_embeddings=False, qkv_bias=False, o_bias=True,
                      mlp_bias=False)


def shards(rank, size, **sizes) -> LlamaShards:
    return LlamaShards.of(shape(**sizes), TensorParallel(rank, size))


def test_heads_split_with_the_kv_heads_they_read():
    assert [shards(r, 2).kv_heads_of() for r in range(2)] == [[0], [1]]
    # More ranks than KV heads: neighbours share one.
    assert [shards(r, 4).kv_heads_of() for r in range(4)] == [[0], [0], [1], [1]]
    # 9 heads over 2 ranks (the default model's 9 and 3): 4 and 5 query heads, whose
    # KV heads do not group evenly, so each query head gets its own copy.
    nine = [shards(r, 2, num_heads=9, num_kv_heads=3) for r in range(2)]
    assert [s.head_span for s in nine] == [(0, 4), (4, 9)]
    assert [s.kv_heads_of() for s in nine] == [[0, 0, 0, 1], [1, 1, 2, 2, 2]]
    assert nine[0].most_kv_heads == 5


def test_slices_of_the_checkpoint_tensors():
    qkv_rows = torch.arange(4 * 16 * 2).view(-1, 1)  # q rows: 4 heads of 16
    rank1 = shards(1, 2)
    assert rank1.part("layers.0.self_attn.qkv_proj", "q", qkv_rows).flatten().tolist() == list(range(32, 64))
    kv_rows = torch.arange(2 * 16).view(-1, 1)
    assert rank1.part("layers.0.self_attn.qkv_proj", "k", kv_rows).flatten().tolist() == list(range(16, 32))
    o = torch.arange(3 * 64).view(3, 64)
    assert torch.equal(rank1.part("layers.0.self_attn.o_proj", None, o), o[:, 32:])
    # A row-parallel bias is added once, by rank 0, after the sum.
    bias = torch.ones(64)
    assert torch.equal(shards(0, 2).part("x.o_proj", None, bias, "bias"), bias)
    assert not rank1.part("x.o_proj", None, bias, "bias").any()
    # The vocabulary (10 rows) splits in equal slices, the last padded with zeros.
    head = torch.arange(1, 11, dtype=torch.float32).view(10, 1)
    assert rank1.vocab_rows(head).flatten().tolist() == [6, 7, 8, 9, 10]
    assert shards(2, 3).vocab_rows(head).flatten().tolist() == [9, 10, 0, 0]


def test_quantized_weights_split_on_block_boundaries_or_refuse():
    weight = torch.randn(8, 128)
    blocks = quantize_blocks(weight, "Q4_1")
    sliced = shards(1, 2, intermediate_size=128).part("mlp.down_proj", None, blocks)
    assert isinstance(sliced, BlockQuantized) and sliced.shape == (8, 64)
    assert torch.equal(sliced.dequantize(), blocks.dequantize()[:, 64:])
    with pytest.raises(ConfigError, match="block boundaries"):
        shards(1, 4, intermediate_size=80).part("mlp.down_proj", None, quantize_blocks(torch.randn(8, 96), "Q8_0"))
    padded = shards(1, 3).vocab_rows(quantize_blocks(torch.randn(10, 32), "Q8_0"))
    assert padded.shape == (4, 32)
    with pytest.raises(ConfigError, match="more than"):
        shards(0, 5)


def tensor_parallel_rank(rank, size, port, model_path, runner_options, results):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    try:
        runner = model_runner_for(model_path, tp=TensorParallel(rank, size), **runner_options)
        results.put((rank, greedy_tokens(runner, PROMPTS, MAX_NEW_TOKENS), runner.load_report.weight_bytes))
    except BaseException as error:
        results.put((rank, repr(error), 0))
        raise
    finally:
        dist.destroy_process_group()


def run_ranks(size: int, model_path, runner_options: dict) -> list[tuple[list[list[int]], int]]:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = free_port()
    ranks = [
        context.Process(target=tensor_parallel_rank, args=(rank, size, port, str(model_path), runner_options, results))
        for rank in range(size)
    ]
    for process in ranks:
        process.start()
    try:
        answers = dict((rank, (tokens, weight_bytes)) for rank, tokens, weight_bytes in
                       (results.get(timeout=JOIN_TIMEOUT) for _ in ranks))
    finally:
        for process in ranks:
            process.join(JOIN_TIMEOUT)
            if process.is_alive():
                process.kill()
    for rank, (tokens, _) in answers.items():
        assert isinstance(tokens, list), f"rank {rank} failed: {tokens}"
    return [answers[rank] for rank in range(size)]


def check_tp2_equals_tp1(model_path, runner_options):
    expected = greedy_tokens(model_runner_for(model_path, **runner_options), PROMPTS, MAX_NEW_TOKENS)
    single_bytes = model_runner_for(model_path, **runner_options).load_report.weight_bytes
    ranks = run_ranks(2, model_path, runner_options)
    for tokens, _ in ranks:
        assert tokens == expected  # every rank samples the same tokens from the gathered logits
    # Each rank holds about half the weights (the norms are whole on both).
    assert all(weight_bytes < 0.6 * single_bytes for _, weight_bytes in ranks)


def test_tp2_greedy_equals_tp1_on_the_tiny_model(tiny_llama_dir):
    check_tp2_equals_tp1(tiny_llama_dir, dict(dtype="float32", max_total_tokens=512, page_size=4))


@pytest.mark.real_model
def test_tp2_greedy_equals_tp1_on_the_default_model():
    # 9 attention heads over 2 ranks: the uneven split, float32 on the dense weights.
    from tercet.formats.dequantized_reference import ensure_dequantized_default_model

    model_path = ensure_dequantized_default_model(progress=False)
    check_tp2_equals_tp1(model_path, dict(dtype="float32", max_total_tokens=512, page_size=4, quantization="none"))


def disagreeing_rank(rank, size, port, results):
    import torch.distributed as dist

    from tercet.config import TercetConfig
    from tercet.parallel.description import describe_rank
    from tercet.parallel.group_agreement import check_group_agrees

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    config = TercetConfig()
    if rank == 1:
        config = config.replace("scheduler", max_running_requests=7)
    try:
        check_group_agrees(describe_rank(config), TensorParallel(rank, size))
        results.put((rank, "agreed"))
    except ConfigError as error:
        results.put((rank, str(error)))
    finally:
        dist.destroy_process_group()


def test_a_rank_that_disagrees_stops_the_start_naming_the_difference():
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = free_port()
    ranks = [context.Process(target=disagreeing_rank, args=(rank, 2, port, results)) for rank in range(2)]
    for process in ranks:
        process.start()
    answers = dict(results.get(timeout=JOIN_TIMEOUT) for _ in ranks)
    for process in ranks:
        process.join(JOIN_TIMEOUT)
    for rank in (0, 1):
        assert "rank 1 disagrees with rank 0 on scheduler.max_running_requests: 7 against 32" in answers[rank]
