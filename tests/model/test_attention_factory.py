"""An attention backend's factory: listed with its reason, refused with it when chosen, built only past its checks."""

import pytest
import torch

from tercet.errors import ConfigError
from tercet.model.attention import AttentionLayout
from tercet.model.attention_factory import AttentionBackendFactory

LAYOUT = AttentionLayout(2, 1, 64, num_layers=1, device=torch.device("cpu"), dtype=torch.float32)


def recording_factory(built, **checks):
    return AttentionBackendFactory("demo", lambda layout: built.append(layout) or "backend", **checks)


def test_a_backend_with_no_checks_is_available_and_built():
    built = []
    factory = recording_factory(built)
    assert factory.unavailable_reason() is None
    assert factory(LAYOUT) == "backend" and built == [LAYOUT]


def test_an_environment_problem_is_listed_and_refuses_the_backend_before_it_is_built():
    built = []
    factory = recording_factory(built, environment_problem=lambda: "no widget installed")
    assert factory.unavailable_reason() == "no widget installed"
    with pytest.raises(ConfigError, match="attention.backend demo is unavailable: no widget installed"):
        factory(LAYOUT)
    assert built == []


def test_a_layout_problem_refuses_the_model_but_not_the_listing():
    built = []
    factory = recording_factory(built, layout_problem=lambda layout: f"not on {layout.device.type}")
    assert factory.unavailable_reason() is None
    with pytest.raises(ConfigError, match="demo is unavailable: not on cpu"):
        factory(LAYOUT)
    assert built == []


def test_determinism_is_refused_with_the_reason_only_when_asked_for():
    built = []
    factory = recording_factory(built, deterministic_refusal="its sums follow the batch")
    with pytest.raises(ConfigError, match="demo cannot serve model.deterministic = true: its sums follow the batch"):
        factory(AttentionLayout(2, 1, 64, 1, torch.device("cpu"), torch.float32, deterministic=True))
    assert factory(LAYOUT) == "backend" and built == [LAYOUT]


@pytest.mark.parametrize(("dtype", "name"), [(torch.int8, "int8"), (torch.float8_e4m3fn, "fp8_e4m3")])
def test_a_quantized_cache_is_refused_unless_the_backend_says_it_reads_one(dtype, name):
    built = []
    quantized = AttentionLayout(2, 1, 64, 1, torch.device("cpu"), torch.float32, kv_dtype=dtype)
    with pytest.raises(ConfigError, match=f'attention.backend demo cannot read a quantized KV cache '
                                          f'\\(cache.kv_dtype = "{name}"\\) in place'):
        recording_factory(built)(quantized)
    assert built == []
    assert recording_factory(built, reads_quantized_cache=True)(quantized) == "backend" and built == [quantized]


def test_a_float_cache_of_another_dtype_is_any_backends():
    built = []
    layout = AttentionLayout(2, 1, 64, 1, torch.device("cpu"), torch.float32, kv_dtype=torch.bfloat16)
    assert recording_factory(built)(layout) == "backend" and built[0].cache_dtype == torch.bfloat16
