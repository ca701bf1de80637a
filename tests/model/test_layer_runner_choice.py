"""The layer runner is chosen once, as the model is attached, and one log line says which and why."""

from __future__ import annotations

import logging

import pytest

from tercet.model.fused_layers import FusedCpuLayers
from tercet.model.fused_ops import cpu_fused_ops_for
from tercet.model.native_layers import NativeLayers
from tercet.model.torch_layers import TorchLayers
from tercet.plugins.linear_layers import few_rows_f32
from tercet.plugins.linear_layers.block_matmul import load_block_matmul
from tercet.testing.runner_factory import model_runner_for

CHOICE_LOGGER = "tercet.model.layer_runner_choice"


def _runner_and_log(model_dir, caplog, **settings):
    with caplog.at_level(logging.INFO, logger=CHOICE_LOGGER):
        runner = model_runner_for(model_dir, max_total_tokens=64, page_size=4, max_running_requests=1, **settings)
    lines = [record.getMessage() for record in caplog.records if record.name == CHOICE_LOGGER]
    assert len(lines) == 1, lines
    return runner, lines[0]


def test_without_native_kernels_the_layers_run_on_torch(tiny_llama_dir, caplog):
    runner, line = _runner_and_log(tiny_llama_dir, caplog, dtype="bfloat16", native_kernels=False)
    assert isinstance(runner.model.layer_runner, TorchLayers)
    assert line.startswith("the model's layers run on TorchLayers") and "model.native_kernels = false" in line


def test_the_default_cpu_model_runs_in_one_call_and_falls_back_on_the_fused_layers(tiny_llama_dir, caplog):
    if load_block_matmul() is None or cpu_fused_ops_for(*_cpu_bfloat16(), allowed=True) is None:
        pytest.skip("the block kernel or the fused steps do not run on this CPU")
    runner, line = _runner_and_log(tiny_llama_dir, caplog, dtype="bfloat16", quantization="q4_1",
                                   native_kernels=True)
    layers = runner.model.layer_runner
    assert isinstance(layers, NativeLayers) and isinstance(layers.layer_by_layer, FusedCpuLayers)
    assert line.startswith("the model's layers run on NativeLayers") and "FusedCpuLayers" in line


def test_bfloat16_dense_layers_run_layer_by_layer_naming_the_layer_without_a_c_function(tiny_llama_dir, caplog):
    if cpu_fused_ops_for(*_cpu_bfloat16(), allowed=True) is None:
        pytest.skip("the fused steps do not build here")
    runner, line = _runner_and_log(tiny_llama_dir, caplog, dtype="bfloat16", quantization="dense",
                                   native_kernels=True)
    assert isinstance(runner.model.layer_runner, FusedCpuLayers)
    assert line.startswith("the model's layers run on FusedCpuLayers")
    assert "layer 0's qkv_proj" in line and "offers no C function over bfloat16" in line


def test_a_float32_model_falls_back_on_torchs_ops(tiny_llama_dir, caplog):
    if few_rows_f32.kernel_library() is None:
        pytest.skip("the few-rows float32 kernel does not run on this CPU")
    runner, line = _runner_and_log(tiny_llama_dir, caplog, dtype="float32", native_kernels=True)
    layers = runner.model.layer_runner
    assert isinstance(layers, NativeLayers) and isinstance(layers.layer_by_layer, TorchLayers)
    assert "TorchLayers (float32 keeps torch's ops" in line


def test_a_model_attached_without_a_runner_runs_on_torch(tiny_llama_dir):
    runner = model_runner_for(tiny_llama_dir, dtype="float32", max_total_tokens=64, page_size=4,
                              max_running_requests=1)
    runner.model.attach(runner.attention_backend, runner.kv_cache)
    assert isinstance(runner.model.layer_runner, TorchLayers)


def _cpu_bfloat16():
    import torch

    return torch.device("cpu"), torch.bfloat16
