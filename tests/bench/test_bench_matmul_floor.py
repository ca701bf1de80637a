"""The decode step's matmuls, timed alone on the tiny model."""

import pytest
import torch

from tercet.bench.matmul_floor import linear_layers_in_forward_order, time_matmuls, weight_bytes_per_pass
from tercet.testing.runner_factory import model_runner_for


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def model(request, tiny_llama_dir):
    runner = model_runner_for(tiny_llama_dir, dtype=request.param, device="cpu", max_total_tokens=256)
    return runner.model


def test_layers_are_every_projection_in_forward_order(model):
    layers = linear_layers_in_forward_order(model)
    expected = []
    for layer in model.model.layers:
        expected += [layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj]
    assert layers == [*expected, model.lm_head]


def test_weight_bytes_count_every_projection_weight_once(model):
    shape = model.shape
    per_layer = (
        shape.hidden_size * (shape.num_heads + 2 * shape.num_kv_heads) * shape.head_dim
        + shape.num_heads * shape.head_dim * shape.hidden_size
        + shape.hidden_size * 2 * shape.intermediate_size
        + shape.intermediate_size * shape.hidden_size
    )
    parameters = shape.num_layers * per_layer + shape.hidden_size * shape.vocab_size
    element_size = torch.empty((), dtype=model.dtype).element_size()
    assert weight_bytes_per_pass(linear_layers_in_forward_order(model), model.dtype) == parameters * element_size


@pytest.mark.parametrize("batch_size", [1, 5])
def test_timing_runs_every_matmul_at_the_batch_size(model, batch_size, monkeypatch):
    calls = []
    for layer in linear_layers_in_forward_order(model):
        original = layer.forward
        monkeypatch.setattr(layer, "forward", lambda x, original=original: calls.append(x.shape) or original(x))
    figures = time_matmuls(model, batch_size, repeats=3)
    num_layers = len(linear_layers_in_forward_order(model))
    assert figures["num_matmuls"] == num_layers
    # One warm-up pass and three timed passes, each calling every layer once on batch_size rows.
    assert len(calls) == 4 * num_layers
    assert {shape[0] for shape in calls} == {batch_size}
    assert figures["matmul_ms"] > 0 and figures["batch_size"] == batch_size


def test_a_batch_size_below_one_is_refused(model):
    with pytest.raises(ValueError, match="at least 1"):
        time_matmuls(model, 0)
