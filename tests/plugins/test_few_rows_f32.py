import logging

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from tercet.plugin_api import LinearTarget
from tercet.native import build as native_build
from tercet.native.cpu import level_in_use, runnable_levels
from tercet.native.levels import level_named
from tercet.plugins.linear_layers import few_rows_f32
from tercet.plugins.linear_layers.few_rows_f32 import (
    KERNEL_MAX_ROWS,
    MAX_ROWS,
    PORTABLE_SOURCE,
    SOURCE,
    FewRowsLinear,
    bind_kernel,
    can_use,
)
from tercet.plugins.linear_layers.methods import DenseLinearMethod

# The portable C path (forced by -DTERCET_PORTABLE), then each x86 level with vector code of its own.
VECTOR_LEVELS = ("avx2", "avxvnni", "avx512vnni", "avx512")


def _library_at(name: str):
    if name not in [level.name for level in runnable_levels()]:
        pytest.skip(f"this CPU does not run level {name}")
    library = native_build.load_library(SOURCE, level=level_named(name))
    assert library.tercet_few_rows_f32_vectorized(), f"the kernel has no vector code at level {name}"
    return library


@pytest.fixture(scope="module", params=["portable C", *VECTOR_LEVELS])
def kernel(request):
    if request.param == "portable C":
        return bind_kernel(native_build.load_library(PORTABLE_SOURCE))
    return bind_kernel(_library_at(request.param))


@pytest.mark.parametrize("level_name", VECTOR_LEVELS)
def test_every_level_computes_the_portable_paths_bits(level_name):
    vector, portable = bind_kernel(_library_at(level_name)), bind_kernel(native_build.load_library(PORTABLE_SOURCE))
    generator = torch.Generator().manual_seed(5)
    for outputs, inputs in ((200, 100), (7, 13), (130, 576)):
        weight = torch.randn(outputs, inputs, generator=generator)
        for rows in (1, 2, 3, 4, 5, 9, 15, 16):
            x = torch.randn(rows, inputs, generator=generator)
            assert torch.equal(_run(vector, x, weight), _run(portable, x, weight)), (outputs, inputs, rows)


def _run(kernel, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape[0], weight.shape[0])
    status = kernel(x.data_ptr(), x.stride(0), x.shape[0], x.shape[1], weight.data_ptr(), weight.shape[0],
                    out.data_ptr(), out.stride(0))
    assert status == 0
    return out


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, KERNEL_MAX_ROWS),
    outputs=st.integers(1, 150),  # past two chunks of 64, and every remainder of a group of outputs
    inputs=st.integers(1, 100),  # not only multiples of 16: the last 16 are masked
    seed=st.integers(0, 2**16),
)
def test_the_kernel_equals_a_float64_product_within_float32_rounding(kernel, rows, outputs, inputs, seed):
    generator = torch.Generator().manual_seed(seed)
    x, weight = torch.randn(rows, inputs, generator=generator), torch.randn(outputs, inputs, generator=generator)
    got = _run(kernel, x, weight)
    expected = x.double() @ weight.double().t()
    # Each sum's error is at most (terms) float32 roundings of the sum of the terms' magnitudes.
    bound = (x.double().abs() @ weight.double().abs().t()) * inputs * 2**-24
    assert ((got.double() - expected).abs() <= bound + 1e-30).all()


def test_a_rows_result_does_not_depend_on_the_rows_beside_it(kernel):
    torch.manual_seed(1)
    weight, x = torch.randn(130, 200), torch.randn(KERNEL_MAX_ROWS, 200)
    together = _run(kernel, x, weight)
    for r in range(KERNEL_MAX_ROWS):
        assert torch.equal(_run(kernel, x[r:r + 1], weight)[0], together[r])
    # rows of a wider tensor (a view with a row stride past its width) give the same
    wide = torch.randn(KERNEL_MAX_ROWS, 256)
    wide[:, :200] = x
    assert torch.equal(_run(kernel, wide[:, :200], weight), together)


def test_the_kernel_refuses_a_row_count_it_has_no_path_for(kernel):
    weight, out = torch.randn(4, 16), torch.empty(KERNEL_MAX_ROWS + 1, 4)
    for rows in (0, KERNEL_MAX_ROWS + 1):
        x = torch.randn(max(rows, 1), 16)
        assert kernel(x.data_ptr(), 16, rows, 16, weight.data_ptr(), 4, out.data_ptr(), 4) == 1


def test_without_the_kernel_the_layer_keeps_torchs_products_and_says_why(monkeypatch, caplog, tmp_path):
    monkeypatch.setattr(native_build, "PREBUILT_DIR", tmp_path)  # as if installed without a compiler
    monkeypatch.setenv("TERCET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", "no-such-compiler")
    monkeypatch.setenv("PATH", "")
    with caplog.at_level(logging.WARNING):
        assert few_rows_f32._library_at.__wrapped__(level_in_use()) is None
    assert "float32 layers at few rows run on torch's kernels: no C compiler found" in caplog.text
    monkeypatch.setattr(few_rows_f32, "load_kernel", lambda: None)
    torch.manual_seed(0)
    linear = nn.Linear(96, 200)
    x = torch.randn(3, 96)
    with torch.inference_mode():
        torch.testing.assert_close(_few_rows(linear)(x), linear(x), rtol=1e-5, atol=1e-5)


def _few_rows(linear: nn.Linear) -> FewRowsLinear:
    layer = FewRowsLinear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    layer.load_state_dict(linear.state_dict())
    return layer


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 2, 5, MAX_ROWS, MAX_ROWS + 1, KERNEL_MAX_ROWS, KERNEL_MAX_ROWS + 1, 40])
def test_matches_f_linear_to_float32_rounding(bias, rows):
    torch.manual_seed(0)
    linear = nn.Linear(96, 200, bias=bias)
    x = torch.randn(rows, 96)
    with torch.inference_mode():
        got, expected = _few_rows(linear)(x), linear(x)
    assert got.shape == expected.shape and got.is_contiguous()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    if rows > max(MAX_ROWS, KERNEL_MAX_ROWS):
        assert torch.equal(got, expected)  # F.linear itself past both


def test_keeps_leading_dimensions_and_an_empty_input():
    torch.manual_seed(0)
    layer = _few_rows(nn.Linear(32, 48))
    x = torch.randn(2, 3, 32)
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
        assert layer(torch.randn(0, 32)).shape == (0, 48)


def test_the_dense_method_uses_it_for_float32_on_cpu_only():
    assert can_use(torch.device("cpu"), torch.float32)
    assert not can_use(torch.device("cpu"), torch.bfloat16)
    assert not can_use(torch.device("cuda"), torch.float32)
    weight = torch.randn(16, 32)
    made = DenseLinearMethod().create(weight, None, LinearTarget("layer", torch.float32, torch.device("cpu")))
    assert isinstance(made, FewRowsLinear)
    assert torch.equal(made.weight, weight)


def _dense_float32_layer(native_kernels: bool, weight: torch.Tensor) -> FewRowsLinear:
    target = LinearTarget("layer", torch.float32, torch.device("cpu"), native_kernels=native_kernels)
    layer = DenseLinearMethod().create(weight, None, target)
    assert isinstance(layer, FewRowsLinear)
    return layer


def test_without_native_kernels_a_layer_keeps_torchs_product_and_offers_no_c_function():
    torch.manual_seed(3)
    weight, x = torch.randn(40, 24), torch.randn(3, 24)
    layer = _dense_float32_layer(False, weight)
    with torch.inference_mode():
        assert torch.equal(layer(x), torch.mm(weight, x.t()).t())
    assert layer.native_matmul() is None


def test_with_the_kernel_a_layer_offers_it_for_float32_rows_up_to_its_limit():
    if few_rows_f32.kernel_library() is None:
        pytest.skip("the kernel does not run on this CPU")
    layer = _dense_float32_layer(True, torch.randn(40, 24))
    offer = layer.native_matmul()
    assert (offer.dtype, offer.max_rows, offer.out_features, offer.in_features) == ("float32", KERNEL_MAX_ROWS, 40, 24)
    assert offer.weights == layer.weight.data_ptr() and offer.function
