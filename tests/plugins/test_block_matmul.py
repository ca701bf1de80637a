"""The block kernel against the dequantized weights, on random shapes, at every level this CPU runs.

The build of each instruction-set level (AVX2, AVX-512 VNNI and AMX on x86; NEON,
dotprod and i8mm on aarch64, tested under qemu in tests/native/) and the portable
C build of the same source all read the layout :func:`pack_units` writes, and all
compute the same bits.
The kernel multiplies x quantized to int8 a block of 32, so each output stays
within that quantization's error (max |x| / 254 of the block an element, times
each weight) of the dequantized product, plus a bfloat16 step
(2**-8 relative) for the one rounding of the float32 sum; a wrong nibble, code,
scale or min is far outside that. The integer model of what it computes is
checked more tightly.
A row's result is the same, bit for bit, whatever rows it shares a call with,
and on a CPU with AMX, whichever of VNNI's and AMX's integer sums the call's
rows chose.

float32 rows take the same steps and keep the float32 sums: no bfloat16 step
in the bound, the same bits on every level, and on rows widened from bfloat16
exactly the sums that the bfloat16 call rounds.
"""

from __future__ import annotations

import ctypes
import logging

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tercet.formats.gguf_blocks import BlockQuantized, quantize_blocks
from tercet.native import build as native_build
from tercet.native.cpu import level_in_use, runnable_levels
from tercet.native.levels import LEVELS, PORTABLE, level_named
from tercet.plugins.linear_layers import block_matmul
from tercet.plugins.linear_layers.block_matmul import (
    PORTABLE_SOURCE,
    SOURCE,
    KernelBlockLinear,
    load_kernel,
    pack_units,
)

# The portable C path (forced by -DTERCET_PORTABLE), then each level with vector code of its own.
VECTOR_LEVELS = [level.name for level in LEVELS if level != PORTABLE]


def _library_at(name: str):
    """The kernel built at level ``name``, or a skip naming it where this CPU does not run it."""
    if name not in [level.name for level in runnable_levels()]:
        pytest.skip(f"this CPU does not run level {name}")
    library = load_kernel(SOURCE, level=level_named(name))
    assert library.tercet_block_matmul_vectorized(), f"the block kernel has no vector code at level {name}"
    return library


@pytest.fixture(scope="module", params=["portable C", *VECTOR_LEVELS])
def kernel(request):
    return load_kernel(PORTABLE_SOURCE) if request.param == "portable C" else _library_at(request.param)


def _block(type_name: str, rows: int, columns: int, seed: int) -> BlockQuantized:
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(rows, columns, generator=generator) * 0.1
    weight[0, :32] += 3.0  # a block with a large min, where Q4_1's shifted min matters most
    return quantize_blocks(weight, type_name)


def _x_quantization_bound(x: torch.Tensor, block: BlockQuantized) -> torch.Tensor:
    """x quantized to int8 a block moves each element by at most max |x| / 254 of its block (less
    a little for the rounding of sx), and that reaches the output through each weight."""
    largest = x.float().view(x.shape[0], -1, 32).abs().amax(dim=-1)  # [rows, blocks]
    per_element = (largest / 250).repeat_interleave(32, dim=1)
    return per_element @ block.dequantize().abs().t()


def _within_bfloat16_rounding(got: torch.Tensor, x: torch.Tensor, block: BlockQuantized) -> None:
    expected = x.float() @ block.dequantize().double().t().float()
    scale = x.float().abs() @ block.dequantize().abs().t()  # bounds the float32 error of the sums
    error = (got.float() - expected).abs()
    # float32 output is the sums unrounded: no bfloat16 step.
    rounding = 0 if got.dtype == torch.float32 else (expected.abs() + _x_quantization_bound(x, block)) * 2**-8
    bound = rounding + _x_quantization_bound(x, block)
    assert (error <= bound + scale * 1e-5 + 1e-6).all(), f"largest error {error.max():.3g}"


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    assert a.dtype == b.dtype
    return torch.equal(a.view(torch.int32 if a.dtype == torch.float32 else torch.int16),
                       b.view(torch.int32 if b.dtype == torch.float32 else torch.int16))


@settings(max_examples=30, deadline=None)
@given(
    type_name=st.sampled_from(["Q4_0", "Q4_1", "Q8_0"]),
    rows=st.integers(1, 70),  # past one chunk of 64 rows, and every row-group remainder
    columns_out=st.integers(1, 80),  # not only multiples of 16: the last tile is padded
    blocks=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_the_kernel_equals_the_dequantized_weights_within_bfloat16_rounding(
    kernel, type_name, rows, columns_out, blocks, seed
):
    block = _block(type_name, columns_out, 32 * blocks, seed)
    x = torch.randn(rows, 32 * blocks, generator=torch.Generator().manual_seed(seed + 1)).bfloat16()
    got = KernelBlockLinear(block, None, kernel)(x)
    assert got.dtype == torch.bfloat16 and got.shape == (rows, columns_out)
    _within_bfloat16_rounding(got, x, block)


@settings(max_examples=20, deadline=None)
@given(
    type_name=st.sampled_from(["Q4_0", "Q4_1", "Q8_0"]),
    rows=st.integers(1, 70),
    columns_out=st.integers(1, 80),
    blocks=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_float32_rows_equal_the_dequantized_weights_within_the_int8_quantization(
    kernel, type_name, rows, columns_out, blocks, seed
):
    block = _block(type_name, columns_out, 32 * blocks, seed)
    x = torch.randn(rows, 32 * blocks, generator=torch.Generator().manual_seed(seed + 1))
    got = KernelBlockLinear(block, None, kernel, torch.float32)(x)
    assert got.dtype == torch.float32 and got.shape == (rows, columns_out)
    _within_bfloat16_rounding(got, x, block)


def _integer_reference(x: torch.Tensor, block: BlockQuantized) -> torch.Tensor:
    """What the kernel computes, in float64: per block, d · sx · Σ q · xq with xq = round(x / sx),
    plus, for the 4-bit kinds, m · sx · Σ xq (Q4_0's m is -8 d)."""
    blocks = x.float().view(x.shape[0], -1, 32)
    largest = blocks.abs().amax(dim=-1, keepdim=True)
    inverse = torch.where(largest > 0, torch.tensor(127.0) / largest, torch.zeros(()))
    xq = torch.round(blocks * inverse)  # float32 products, rounded half to even, as lrintf does
    sx = largest / 127.0
    codes = block.codes.view(torch.int8) if block.type_name == "Q8_0" else block.codes
    dots = torch.einsum("rbk,nbk->rnb", xq.double(), codes.double().view(block.shape[0], -1, 32))
    factors = block.scales.float()[None] * sx.squeeze(-1)[:, None]  # d · sx in float32, as the kernel does
    out = (dots * factors.double()).sum(dim=-1)
    if block.type_name == "Q8_0":
        return out
    mins = block.mins if block.mins is not None else -8 * block.scales
    quantized_sums = sx.squeeze(-1) * xq.sum(dim=-1)  # float32, as the kernel rounds it
    return out + quantized_sums.double() @ mins.double().t()


@settings(max_examples=20, deadline=None)
@given(
    type_name=st.sampled_from(["Q4_0", "Q4_1", "Q8_0"]),
    dtype=st.sampled_from([torch.bfloat16, torch.float32]),
    rows=st.integers(1, 12),
    columns_out=st.integers(1, 40),
    blocks=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_the_kernel_multiplies_x_quantized_to_int8_a_block(kernel, type_name, dtype, rows, columns_out, blocks,
                                                           seed):
    block = _block(type_name, columns_out, 32 * blocks, seed)
    x = torch.randn(rows, 32 * blocks, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
    x[0, :32] = 0  # an all-zero block: sx = 0
    got = KernelBlockLinear(block, None, kernel, dtype)(x).double()
    reference = _integer_reference(x, block)
    # The float32 steps add a few ulps of the terms' size, and bfloat16 output its final rounding.
    terms = (x.float().abs() @ block.dequantize().abs().t()).double()
    rounding = reference.abs() * 2**-8 + 1e-5 if dtype == torch.bfloat16 else 1e-6
    assert ((got - reference).abs() <= rounding + terms * 1e-6).all()


def _awkward_x(rows: int, columns: int, seed: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Random rows with, block by block, the inputs that quantization treats specially: an all-zero block,
    blocks of tiny (down to where 127 / max |x| overflows) and huge magnitudes, and exact ties; in float32,
    inputs that bfloat16 cannot hold too (a block's largest a hair from 127, subnormals)."""
    x = torch.randn(rows, columns, generator=torch.Generator().manual_seed(seed))
    x[:, :32] = 0.0
    if columns >= 96:
        x[:, 32:64] *= 1e-37
        x[:, 64:96] *= 1e30
    if columns >= 128:
        x[:, 96:128] = torch.tensor([127.0, 0.5, -0.5, 1.5, -2.5, 64.0, 0.0, -127.0] * 4)
    if columns >= 160 and dtype == torch.float32:
        x[:, 128:160] = torch.tensor([126.99999, 0.50000006, -63.499996, 2.4999998] * 8)
        x[:, 140:144] *= 1e-39  # subnormal beside normal inputs
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bfloat16", "float32"])
@pytest.mark.parametrize("level_name", VECTOR_LEVELS)
@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q8_0"])
def test_every_level_computes_the_portable_paths_bits(level_name, type_name, dtype):
    library, portable = _library_at(level_name), load_kernel(PORTABLE_SOURCE)
    for columns_out, blocks in ((40, 3), (200, 5), (17, 18)):
        block = _block(type_name, columns_out, 32 * blocks, seed=columns_out)
        layer = KernelBlockLinear(block, None, library, dtype)
        reference = KernelBlockLinear(block, None, portable, dtype)
        # Every remainder of a group of rows, and past the 48 rows from which a CPU with AMX takes its tiles.
        for rows in (1, 2, 3, 4, 5, 9, 17, 70):
            x = _awkward_x(rows, 32 * blocks, seed=rows, dtype=dtype)
            assert _same_bits(layer(x), reference(x)), (columns_out, rows)


@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q8_0"])
def test_float32_rows_widened_from_bfloat16_give_the_sums_the_bfloat16_call_rounds(kernel, type_name):
    """The same quantized blocks and float32 sums: rounded to bfloat16 (as torch rounds), the float32
    call's output is the bfloat16 call's, bit for bit, at every row count (AMX's too, where there is AMX)."""
    for columns_out, blocks in ((40, 3), (17, 18)):
        block = _block(type_name, columns_out, 32 * blocks, seed=columns_out + 1)
        in_float32, in_bfloat16 = (KernelBlockLinear(block, None, kernel, dtype)
                                   for dtype in (torch.float32, torch.bfloat16))
        for rows in (1, 5, 70):
            x = _awkward_x(rows, 32 * blocks, seed=rows + 7)
            assert _same_bits(in_float32(x.float()).bfloat16(), in_bfloat16(x)), (columns_out, rows)


def _on(library, layer: KernelBlockLinear, x: torch.Tensor, use_amx: bool) -> torch.Tensor:
    out = torch.empty(x.shape[0], layer.out_features, dtype=layer.dtype)
    on = library.tercet_block_matmul_f32_on if layer.dtype == torch.float32 else library.tercet_block_matmul_on
    status = on(x.data_ptr(), x.stride(0), x.shape[0], layer.in_features, layer.units_pointer, layer.kind_code,
                layer.out_features, out.data_ptr(), layer.out_features, int(use_amx))
    assert status == 0
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bfloat16", "float32"])
@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q8_0"])
def test_amx_and_vnni_integer_sums_give_the_same_bits(type_name, dtype):
    library = block_matmul.load_block_matmul()
    if library is None or not library.tercet_block_matmul_amx():
        pytest.skip("this CPU (or its kernel) gives no AMX")
    generator = torch.Generator().manual_seed(11)
    for columns_out, blocks in ((16, 1), (40, 2), (200, 18)):
        block = _block(type_name, columns_out, 32 * blocks, seed=columns_out)
        layer = KernelBlockLinear(block, None, library, dtype)
        for rows in (1, 15, 16, 17, 33, 64, 65, 130):  # partial groups of 16 and 32, and chunks of 64
            x = torch.randn(rows, 32 * blocks, generator=generator).to(dtype)
            assert _same_bits(_on(library, layer, x, True), _on(library, layer, x, False)), (columns_out, rows)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bfloat16", "float32"])
@pytest.mark.parametrize("type_name", ["Q4_1", "Q8_0"])
def test_a_rows_result_does_not_depend_on_its_batch(kernel, type_name, dtype):
    block = _block(type_name, 96, 128, seed=3)
    layer = KernelBlockLinear(block, None, kernel, dtype)
    x = torch.randn(70, 128, generator=torch.Generator().manual_seed(4)).to(dtype)
    together = layer(x)  # on AMX's integer sums where this CPU has AMX, one row at a time on VNNI's
    for row in (0, 4, 5, 69):
        assert _same_bits(layer(x[row:row + 1]), together[row:row + 1])
    assert _same_bits(layer(x[3:9]), together[3:9])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bfloat16", "float32"])
def test_strided_and_batched_inputs_and_a_bias(kernel, dtype):
    block = _block("Q4_1", 32, 64, seed=5)
    bias = torch.randn(32)
    plain, biased = KernelBlockLinear(block, None, kernel, dtype), KernelBlockLinear(block, bias, kernel, dtype)
    wide = torch.randn(2, 3, 96).to(dtype)
    x = wide[..., :64]  # rows 96 apart, as a slice of a fused projection hands them over
    got = plain(x)
    assert got.shape == (2, 3, 32) and got.dtype == dtype
    assert torch.equal(got, plain(x.contiguous()))
    _within_bfloat16_rounding(got.reshape(6, 32), x.reshape(6, 64), block)
    assert torch.equal(biased(x), got + bias.to(dtype))
    assert plain(torch.empty(0, 64).to(dtype)).shape == (0, 32)


def test_the_float32_layer_offers_the_float32_function_for_any_number_of_rows(kernel):
    """What a float32 model's one-call runner (native_layers.c) takes: the float32 function, float32 rows."""
    layer = KernelBlockLinear(_block("Q4_1", 32, 64, seed=8), None, kernel, torch.float32)
    offer = layer.native_matmul()
    assert offer.dtype == "float32" and offer.max_rows == 0
    assert offer.function == ctypes.cast(kernel.tercet_block_matmul_f32, ctypes.c_void_p).value
    assert (offer.weights, offer.kind, offer.out_features, offer.in_features) == (layer.units_pointer, 0, 32, 64)
    assert KernelBlockLinear(_block("Q4_1", 32, 64, seed=8), None, kernel).native_matmul().dtype == "bfloat16"


def test_a_q4_1_weight_takes_the_bytes_of_its_file(kernel):
    block = _block("Q4_1", 64, 256, seed=6)
    units = pack_units(block, kernel)
    assert units.dtype == torch.uint8 and units.numel() == 64 * 256 * 20 // 32  # 20 bytes per 32 weights


def test_without_a_compiler_or_kernels_built_at_install_the_block_methods_keep_torchs_kernels_and_say_why(
    monkeypatch, caplog, tmp_path
):
    monkeypatch.setattr(native_build, "PREBUILT_DIR", tmp_path)  # as if installed without a compiler
    monkeypatch.setenv("CC", "no-such-compiler")
    monkeypatch.setenv("PATH", "")
    with caplog.at_level(logging.WARNING):
        assert block_matmul._load_at.__wrapped__(level_in_use()) is None
    assert "GGUF block weights run on torch's kernels: " in caplog.text and "no C compiler found" in caplog.text


def test_at_the_portable_level_the_block_methods_keep_torchs_kernels_and_say_why(caplog):
    with caplog.at_level(logging.INFO):
        assert block_matmul._load_at.__wrapped__(PORTABLE) is None
    assert "the block kernel has no vector code at level portable" in caplog.text


def test_the_c_function_refuses_shapes_that_do_not_fit_instead_of_reading_past_them(kernel):
    """A caller in C gets the checks Python's layer makes: 2 for a K that is not a multiple of 32, an unknown
    kind, an N of 0, or a row stride shorter than a row; nothing is written."""
    x, y = torch.randn(3, 64).bfloat16(), torch.zeros(3, 16, dtype=torch.bfloat16)
    units = pack_units(_block("Q4_1", 16, 64, seed=1), kernel)
    call = kernel.tercet_block_matmul
    good = (x.data_ptr(), 64, 3, 64, units.data_ptr(), 0, 16, y.data_ptr(), 16)
    for position, bad in ((3, 48), (5, 7), (6, 0), (1, 32), (8, 8)):
        arguments = list(good)
        arguments[position] = bad
        assert call(*arguments) == 2, (position, bad)
    assert not y.any()
    assert call(*good) == 0 and y.any()
