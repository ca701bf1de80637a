"""Block formats: reading and quantizing agree with the gguf package's reference, bit for bit."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants
from gguf_fixtures import UNSUPPORTED_TENSOR_NAME, write_gguf, write_gguf_with_tensor_type

from tercet.errors import ConfigError
from tercet.formats.default_model import find_default_gguf
from tercet.formats.gguf_blocks import SUPPORTED_TENSOR_TYPES, BlockQuantized, quantize_blocks, read_tensor
from tercet.formats.gguf_file import GgufError, GgufFile

REAL_TENSORS = ["token_embd.weight", "blk.0.attn_q.weight", "blk.7.ffn_down.weight", "blk.0.attn_norm.weight",
                "output_norm.weight"]


@pytest.fixture(scope="module")
def reference_tensors():
    reader = gguf.GGUFReader(str(find_default_gguf()))
    return {t.name: t for t in reader.tensors if t.name in REAL_TENSORS}


def _same_floats(actual: torch.Tensor, expected: np.ndarray) -> bool:
    """Equal bit patterns (so -0.0 vs 0.0 or a NaN would count as different)."""
    return actual.shape == expected.shape and np.array_equal(
        actual.numpy().view(np.uint32), np.ascontiguousarray(expected, dtype=np.float32).view(np.uint32)
    )


@pytest.mark.parametrize("name", REAL_TENSORS)
def test_real_tensors_read_as_ggufs_reference_dequantizes_them(default_gguf, reference_tensors, name):
    reference = reference_tensors[name]
    expected = quants.dequantize(reference.data, reference.tensor_type)
    tensor = read_tensor(default_gguf, name)
    if reference.tensor_type == GGMLQuantizationType.F32:
        assert tensor.dtype == torch.float32 and _same_floats(tensor, expected)
        return
    assert isinstance(tensor, BlockQuantized) and tensor.type_name == reference.tensor_type.name
    assert _same_floats(tensor.dequantize(), expected)


def test_block_codes_and_scales_have_their_documented_form(default_gguf):
    q4_1 = read_tensor(default_gguf, "blk.0.ffn_gate.weight")
    assert q4_1.shape == (1536, 576)
    assert q4_1.codes.dtype == torch.uint8 and int(q4_1.codes.max()) <= 15
    assert q4_1.scales.dtype == q4_1.mins.dtype == torch.float32
    assert q4_1.scales.shape == q4_1.mins.shape == (1536, 576 // 32)
    q8_0 = read_tensor(default_gguf, "token_embd.weight")
    assert q8_0.codes.dtype == torch.int8 and q8_0.mins is None and q8_0.scales.shape == (49152, 18)
    assert int(q8_0.codes.min()) < 0 < int(q8_0.codes.max())


def test_float_tensors_are_copies_not_views_of_the_file(default_gguf):
    first = read_tensor(default_gguf, "output_norm.weight")
    first.zero_()  # would fail on a read-only map, or change the second read if shared
    assert read_tensor(default_gguf, "output_norm.weight").abs().sum() > 0


def _random_weight(rows=48, columns=128, seed=0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(rows, columns, generator=generator) * torch.rand(rows, 1, generator=generator) * 2
    # Blocks the rounding rules treat specially: all zero, constant, sign ties, exact halves.
    weight[0, :32] = 0.0
    weight[1, :32] = 0.75
    weight[2, :32] = torch.tensor([-1.0, 1.0] * 16)
    weight[3, :32] = torch.arange(32) - 15.5
    weight[4, :32] = torch.tensor([127.0] + [k + 0.5 for k in range(-15, 16)])  # Q8_0's d is 1: exact halves
    weight[5, :32] = 1e-30
    return weight


def _written_and_read(tmp_path, raw: np.ndarray, qtype: GGMLQuantizationType) -> BlockQuantized:
    """Reference-quantized bytes put through a real file and read_tensor (which is checked above)."""
    path = write_gguf(tmp_path / f"{qtype.name}.gguf", "llama", {}, {"w": (raw, qtype)})
    return read_tensor(GgufFile(path), "w")


@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q8_0"])
def test_quantize_blocks_matches_ggufs_reference_quantizer(tmp_path, type_name):
    weight = _random_weight()
    qtype = GGMLQuantizationType[type_name]
    reference_bytes = quants.quantize(weight.numpy(), qtype)
    reference = _written_and_read(tmp_path, reference_bytes, qtype)
    ours = quantize_blocks(weight, type_name)
    assert ours.type_name == type_name and ours.codes.dtype == reference.codes.dtype
    assert torch.equal(ours.codes, reference.codes)
    assert torch.equal(ours.scales, reference.scales)
    assert (ours.mins is None) == (type_name != "Q4_1")
    if ours.mins is not None:
        assert torch.equal(ours.mins, reference.mins)
    assert _same_floats(ours.dequantize(), quants.dequantize(reference_bytes, qtype))


@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q8_0"])
def test_reading_a_written_q_tensor_matches_the_reference_dequantizer(tmp_path, type_name):
    qtype = GGMLQuantizationType[type_name]
    reference_bytes = quants.quantize(_random_weight(seed=1).numpy(), qtype)
    read = _written_and_read(tmp_path, reference_bytes, qtype)
    assert _same_floats(read.dequantize(), quants.dequantize(reference_bytes, qtype))


def test_quantizing_works_in_row_chunks_as_in_one_go(monkeypatch):
    from tercet.formats import gguf_blocks

    weight = _random_weight(rows=40, columns=64)
    whole = quantize_blocks(weight, "Q4_1")
    monkeypatch.setattr(gguf_blocks, "_QUANTIZE_CHUNK_ELEMENTS", 64 * 3)  # three rows at a time
    chunked = quantize_blocks(weight, "Q4_1")
    assert torch.equal(whole.codes, chunked.codes) and torch.equal(whole.scales, chunked.scales)
    assert torch.equal(whole.mins, chunked.mins)


def test_a_bfloat16_weight_quantizes_as_its_float32_values():
    weight = _random_weight().to(torch.bfloat16)
    from_bf16, from_f32 = quantize_blocks(weight, "Q8_0"), quantize_blocks(weight.float(), "Q8_0")
    assert torch.equal(from_bf16.codes, from_f32.codes) and torch.equal(from_bf16.scales, from_f32.scales)


def test_f16_and_bf16_tensors_read_as_their_dtype(tmp_path):
    values = torch.randn(8, 64).to(torch.bfloat16).float()  # representable in both half formats
    tensors = {
        "half": (values.numpy().astype(np.float16), GGMLQuantizationType.F16),
        "brain": (quants.quantize(values.numpy(), GGMLQuantizationType.BF16), GGMLQuantizationType.BF16),
    }
    parsed = GgufFile(write_gguf(tmp_path / "halves.gguf", "llama", {}, tensors))
    half, brain = read_tensor(parsed, "half"), read_tensor(parsed, "brain")
    assert half.dtype == torch.float16 and brain.dtype == torch.bfloat16
    assert half.shape == brain.shape == (8, 64)
    assert torch.equal(half.float(), values) and torch.equal(brain.float(), values)


@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q8_0"])
def test_rows_selects_rows_of_codes_and_scales_alike(type_name):
    quantized = quantize_blocks(_random_weight(), type_name)
    index = torch.tensor([5, 0, 47, 5, 12])
    assert torch.equal(quantized.rows(index).dequantize(), quantized.dequantize()[index])
    assert quantized.rows(index).shape == (5, 128)


def test_concat_stacks_along_rows():
    top, bottom = quantize_blocks(_random_weight(seed=2), "Q4_1"), quantize_blocks(_random_weight(seed=3), "Q4_1")
    both = BlockQuantized.concat([top, bottom])
    assert both.shape == (96, 128)
    assert torch.equal(both.dequantize(), torch.cat([top.dequantize(), bottom.dequantize()]))
    with pytest.raises(ValueError, match="cannot concatenate Q8_0"):
        BlockQuantized.concat([top, quantize_blocks(_random_weight(), "Q8_0")])
    with pytest.raises(ValueError, match="cannot concatenate"):
        BlockQuantized.concat([top, quantize_blocks(_random_weight(columns=64), "Q4_1")])


def test_a_row_length_that_is_not_whole_blocks_cannot_be_quantized():
    with pytest.raises(ConfigError, match=r"shape \(4, 48\) to Q8_0.*block size 32"):
        quantize_blocks(torch.randn(4, 48), "Q8_0")
    with pytest.raises(ConfigError, match=r"shape \(64,\)"):
        quantize_blocks(torch.randn(64), "Q4_0")
    with pytest.raises(ConfigError, match="cannot quantize to 'Q5_K'; supported: Q4_0, Q4_1, Q8_0"):
        quantize_blocks(torch.randn(4, 64), "Q5_K")


def test_an_unsupported_tensor_type_names_the_tensor_type_and_supported_list(tmp_path):
    parsed = GgufFile(write_gguf_with_tensor_type(tmp_path / "k.gguf", "Q5_K"))
    assert read_tensor(parsed, "blk.0.ffn_gate.weight").type_name == "Q8_0"  # its neighbours still read
    with pytest.raises(GgufError) as error:
        read_tensor(parsed, UNSUPPORTED_TENSOR_NAME)
    message = str(error.value)
    assert "k.gguf" in message and repr(UNSUPPORTED_TENSOR_NAME) in message and "type Q5_K" in message
    assert "supported: " + ", ".join(SUPPORTED_TENSOR_TYPES) in message


def test_an_inconsistent_block_tensor_is_refused():
    codes = torch.zeros(4, 64, dtype=torch.uint8)
    with pytest.raises(ValueError, match="needs mins"):
        BlockQuantized("Q4_1", codes, torch.zeros(4, 2), None)
    with pytest.raises(ValueError, match=r"scales are \(4, 3\), expected \(4, 2\)"):
        BlockQuantized("Q4_0", codes, torch.zeros(4, 3), None)
