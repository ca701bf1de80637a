import pytest
import torch
from torch import nn

from tercet.native.cpu import level_in_use
from tercet.native.levels import level_named
from tercet.plugins.linear_layers import packed_bf16
from tercet.plugins.linear_layers.packed_bf16 import PackedLinear, can_pack
from tercet.testing.runner_factory import model_runner_for

needs_packing = pytest.mark.skipif(
    not can_pack(torch.device("cpu"), torch.bfloat16),
    reason=f"no oneDNN bfloat16 packing at level {level_in_use().name} (it needs AVX-512 BW/VL/DQ)",
)


def test_packing_follows_the_level_in_use_not_only_torchs_build(monkeypatch):
    """An AVX2 level never packs (oneDNN's reorder raises there); an AVX-512 level packs where torch can."""
    cpu_bf16 = (torch.device("cpu"), torch.bfloat16)
    monkeypatch.setattr(packed_bf16, "level_in_use", lambda: level_named("avx2"))
    assert not can_pack(*cpu_bf16)
    monkeypatch.setattr(packed_bf16, "level_in_use", lambda: level_named("avx512"))
    assert can_pack(*cpu_bf16) == torch.ops.mkldnn._is_mkldnn_bf16_supported()


@needs_packing
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("batch", [1, 5, 33])
def test_packed_linear_is_bit_identical_to_the_plain_one(bias, batch):
    torch.manual_seed(0)
    linear = nn.Linear(96, 200, bias=bias).to(torch.bfloat16)
    x = torch.randn(batch, 96).to(torch.bfloat16)
    with torch.inference_mode():
        assert torch.equal(PackedLinear(linear)(x), linear(x))


def test_float32_and_other_devices_are_not_packed():
    assert not can_pack(torch.device("cpu"), torch.float32)
    assert not can_pack(torch.device("cuda"), torch.bfloat16)


def _bf16_runner(model_dir):
    return model_runner_for(
        model_dir, dtype="bfloat16", device="cpu", max_total_tokens=256, page_size=4, max_running_requests=2
    )


def _prompt_logits(runner, prompt):
    row = runner.req_to_token_pool.alloc()
    runner.req_to_token_pool.assign_pages(row, 0, runner.page_allocator.alloc(-(-len(prompt) // 4)), 4)
    return runner.forward(runner.build_batch([row], [0], [prompt]))


@needs_packing
def test_a_bfloat16_runner_serves_packed_weights_with_the_same_logits(tiny_llama_dir, monkeypatch):
    prompt = [1, 17, 230, 4095, 12, 9]
    packed = _bf16_runner(tiny_llama_dir)
    assert isinstance(packed.model.lm_head, PackedLinear)
    assert isinstance(packed.model.model.layers[0].self_attn.qkv_proj, PackedLinear)
    packed_logits = _prompt_logits(packed, prompt)

    monkeypatch.setattr("tercet.plugins.linear_layers.methods.can_pack", lambda device, dtype: False)
    plain = _bf16_runner(tiny_llama_dir)
    assert isinstance(plain.model.lm_head, nn.Linear)
    assert torch.equal(packed_logits, _prompt_logits(plain, prompt))


@needs_packing
def test_new_weights_from_disk_are_packed_too(tiny_llama_dir):
    runner = _bf16_runner(tiny_llama_dir)
    runner.update_weights_from_disk(tiny_llama_dir)
    assert isinstance(runner.model.lm_head, PackedLinear)
