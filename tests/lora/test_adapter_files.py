"""Reading a PEFT adapter: every bad input is refused with its reason, before anything is kept."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tercet.lora.adapter_files import CONFIG_FILE, WEIGHTS_FILE, LoraAdapterError, PartShape, read_adapter
from tercet.testing.tiny_model import TINY_LLAMA_SHAPE

# The tiny Llama's parts (tercet.testing.tiny_model): hidden 64, 4 heads of 16 and 2 KV heads, MLP 128, 2 layers.
TARGETS = {(layer, part): PartShape(*shape) for layer in range(2) for part, shape in {
    "q": (64, 64), "k": (64, 32), "v": (64, 32), "o": (64, 64), "gate": (64, 128), "up": (64, 128),
    "down": (128, 64)}.items()}


@pytest.fixture
def adapter_copy(tiny_adapters, tmp_path):
    """A copy of the rank-4 adapter of every projection, to spoil."""
    return shutil.copytree(tiny_adapters["every"], tmp_path / "adapter")


def _edit_config(directory, **changes):
    path = directory / CONFIG_FILE
    settings = json.loads(path.read_text())
    settings.update(changes)
    path.write_text(json.dumps(settings))


def test_a_peft_adapter_reads_with_its_scale_folded_into_b(adapter_copy):
    adapter = read_adapter("every", str(adapter_copy), TARGETS, max_rank=8, dtype=torch.float32)
    assert adapter.rank == 4 and len(adapter.tensors) == 14
    raw = load_file(str(adapter_copy / WEIGHTS_FILE))
    lora_b = next(tensor for name, tensor in raw.items() if "layers.1.mlp.down_proj.lora_B" in name)
    torch.testing.assert_close(adapter.tensors[(1, "down")][1], lora_b * 2.0)  # lora_alpha 8 / r 4


def test_the_targets_here_are_the_tiny_models_parts():
    shape = TINY_LLAMA_SHAPE
    assert (shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]) == (64, 128, 2)
    assert (shape["num_attention_heads"], shape["num_key_value_heads"]) == (4, 2)


def test_a_rank_above_max_rank_is_refused(adapter_copy):
    with pytest.raises(LoraAdapterError, match="rank 4 is above lora.max_rank = 2"):
        read_adapter("every", str(adapter_copy), TARGETS, max_rank=2, dtype=torch.float32)


def test_target_modules_the_model_lacks_are_named(adapter_copy):
    _edit_config(adapter_copy, target_modules=["q_proj", "lm_head", "fc1"])
    with pytest.raises(LoraAdapterError, match="target modules the model lacks: fc1, lm_head"):
        read_adapter("every", str(adapter_copy), TARGETS, max_rank=8, dtype=torch.float32)


def test_a_tensor_that_does_not_fit_its_base_layer_is_refused(adapter_copy):
    path = adapter_copy / WEIGHTS_FILE
    tensors = load_file(str(path))
    name = next(name for name in tensors if "layers.0.self_attn.k_proj.lora_B" in name)
    tensors[name] = torch.randn(48, 4)
    save_file(tensors, str(path))
    with pytest.raises(LoraAdapterError, match=r"layer 0 k_proj: lora_A is \[4, 64\] and lora_B \[48, 4\]"):
        read_adapter("every", str(adapter_copy), TARGETS, max_rank=8, dtype=torch.float32)


def test_a_layer_the_model_lacks_is_refused(adapter_copy):
    path = adapter_copy / WEIGHTS_FILE
    tensors = load_file(str(path))
    for name in [name for name in tensors if "layers.1." in name]:
        tensors[name.replace("layers.1.", "layers.7.")] = tensors.pop(name)
    save_file(tensors, str(path))
    with pytest.raises(LoraAdapterError, match="the model has no [a-z]+_proj in layer 7"):
        read_adapter("every", str(adapter_copy), TARGETS, max_rank=8, dtype=torch.float32)


@pytest.mark.parametrize("spoil, named", [
    (lambda d: (d / WEIGHTS_FILE).unlink(), "no adapter_model.safetensors there"),
    (lambda d: (d / CONFIG_FILE).unlink(), "no adapter_config.json there"),
    (lambda d: (d / WEIGHTS_FILE).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json"), "cannot be read"),
    (lambda d: (d / CONFIG_FILE).write_text("{r: 4"), "adapter_config.json cannot be read"),
])
def test_a_missing_or_corrupt_file_is_refused(adapter_copy, spoil, named):
    spoil(adapter_copy)
    with pytest.raises(LoraAdapterError, match=named):
        read_adapter("every", str(adapter_copy), TARGETS, max_rank=8, dtype=torch.float32)


def test_a_directory_that_does_not_exist_is_refused(tmp_path):
    with pytest.raises(LoraAdapterError, match="no adapter_config.json there"):
        read_adapter("gone", str(tmp_path / "gone"), TARGETS, max_rank=8, dtype=torch.float32)
