"""The encoder runner: embeddings of whole sequences, an empty KV pool, and what it refuses."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tercet.errors import ConfigError
from tercet.model.tensor_parallel import TensorParallel
from tercet.testing.runner_factory import encoder_runner_for


@pytest.fixture(scope="module")
def runner(minilm_dir):
    return encoder_runner_for(minilm_dir)


def test_it_embeds_in_float32_unit_vectors_of_the_hidden_size(runner):
    vectors = runner.embed([[101, 7592, 102], [101, 1037, 2088, 102]])
    assert vectors.shape == (2, 384) and vectors.dtype == torch.float32
    assert torch.allclose(vectors.norm(dim=1), torch.ones(2))
    assert (runner.context_len, runner.vocab_size, runner.embedding_size) == (512, 30522, 384)
    assert runner.can_generate is False


def test_its_kv_pool_is_empty_so_nothing_can_be_admitted_to_generate(runner):
    assert runner.page_allocator.num_total == 0 and runner.req_to_token_pool.num_free == 0
    info = runner.weights_info
    assert (info["kv_cache_bytes"], info["max_total_tokens"]) == (0, 0)
    assert info["pooling"] == {"method": "mean", "normalize": True, "source": "modules.json"}


def test_an_encoder_without_modules_json_needs_model_pooling(minilm_dir, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(minilm_dir, bare)
    (bare / "modules.json").unlink()
    with pytest.raises(ConfigError, match="set model.pooling to mean, cls or last"):
        encoder_runner_for(bare)
    assert encoder_runner_for(bare, pooling="cls").pooling.method == "cls"


@pytest.mark.parametrize("options, message", [
    ({"quantization": "int8"}, "dense weights only"),
    ({"tp": TensorParallel(0, 2)}, "tensor parallelism splits decoders only"),
])
def test_what_an_encoder_cannot_do_is_refused_at_start_up(minilm_dir, options, message):
    with pytest.raises(ConfigError, match=message):
        encoder_runner_for(minilm_dir, **options)


def test_reloading_weights_of_another_size_is_refused_and_the_old_ones_serve(runner, minilm_dir, tmp_path):
    before = runner.embed([[101, 102]])
    smaller = tmp_path / "smaller"
    smaller.mkdir()
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(smaller)
    with pytest.raises(ConfigError, match="different architecture"):
        runner.update_weights_from_disk(smaller)
    assert torch.equal(runner.embed([[101, 102]]), before)
    runner.update_weights_from_disk(minilm_dir)
    assert torch.allclose(runner.embed([[101, 102]]), before)


def test_a_decoder_checkpoint_is_not_an_encoder(tiny_llama_dir):
    with pytest.raises(ConfigError, match="not an encoder-only model"):
        encoder_runner_for(tiny_llama_dir)
    assert json.loads((tiny_llama_dir / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
