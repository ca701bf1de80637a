"""[cache] kv_dtype resolved to the dtype the pool stores, and refused where a quantized cache cannot run."""

import pytest
import torch

from tercet.errors import ConfigError
from tercet.model.kv_dtypes import KV_DTYPES, check_quantized_cache_runs, kv_dtype_name, resolve_kv_dtype

CPU = torch.device("cpu")


@pytest.mark.parametrize("activations", [torch.float32, torch.bfloat16])
def test_auto_stores_the_activations_dtype_and_a_name_stores_its_own(activations):
    assert resolve_kv_dtype("auto", activations) == activations
    assert resolve_kv_dtype("bfloat16", activations) == torch.bfloat16
    assert resolve_kv_dtype("float32", activations) == torch.float32
    assert resolve_kv_dtype("int8", activations) == torch.int8
    assert resolve_kv_dtype("fp8_e4m3", activations) == torch.float8_e4m3fn


def test_an_unknown_name_is_refused_with_the_known_ones():
    with pytest.raises(ConfigError,
                       match="cache.kv_dtype 'int4' is not one of auto, bfloat16, float32, int8, fp8_e4m3"):
        resolve_kv_dtype("int4", torch.float32)


def test_names_go_back_as_the_config_spells_them():
    assert [kv_dtype_name(dtype) for dtype in KV_DTYPES.values()] == list(KV_DTYPES)
    assert kv_dtype_name(torch.float16) == "float16"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8, torch.float8_e4m3fn])
def test_any_cache_runs_on_one_cpu_rank(dtype):
    check_quantized_cache_runs(dtype, CPU, tp_size=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_float_cache_runs_anywhere(dtype):
    check_quantized_cache_runs(dtype, torch.device("cuda"), tp_size=4)


@pytest.mark.parametrize(("dtype", "name"), [(torch.int8, "int8"), (torch.float8_e4m3fn, "fp8_e4m3")])
def test_a_quantized_cache_is_refused_off_the_cpu_and_with_tensor_parallelism(dtype, name):
    with pytest.raises(ConfigError, match=f'cache.kv_dtype = "{name}" is read in place only by the paged_cpu '
                                          "kernel, on a CPU; the model runs on cuda"):
        check_quantized_cache_runs(dtype, torch.device("cuda"), tp_size=1)
    with pytest.raises(ConfigError, match=rf'cache.kv_dtype = "{name}" is not supported with tensor parallelism '
                                          r"\(parallel.tp_size = 2\)"):
        check_quantized_cache_runs(dtype, CPU, tp_size=2)
