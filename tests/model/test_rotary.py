from types import SimpleNamespace

import pytest
import torch

from tercet.errors import ConfigError
from tercet.model.rotary import RopeSettings, inverse_frequencies

LLAMA3_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def _transformers_inverse_frequencies(rope_type: str, **config_kwargs):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=1024, **config_kwargs)
    return ROPE_INIT_FUNCTIONS[rope_type](config)[0], config


def test_default_rope_reads_transformers_5_rope_parameters():
    from transformers import LlamaConfig

    config = LlamaConfig(rope_theta=12345.0)
    assert RopeSettings.from_config(config) == RopeSettings(theta=12345.0)


def test_older_configs_with_rope_theta_and_rope_scaling():
    config = SimpleNamespace(rope_theta=500000.0, rope_scaling={"type": "llama3", **LLAMA3_SCALING})
    settings = RopeSettings.from_config(config)
    assert settings.theta == 500000.0 and settings.rope_type == "llama3"
    assert settings.scaling == LLAMA3_SCALING
    assert RopeSettings.from_config(SimpleNamespace(rope_theta=10000.0, rope_scaling=None)).rope_type == "default"


def test_llama3_frequencies_match_transformers():
    expected, config = _transformers_inverse_frequencies(
        "llama3", rope_theta=500000.0, rope_scaling={"rope_type": "llama3", **LLAMA3_SCALING}
    )
    ours = inverse_frequencies(RopeSettings.from_config(config), head_dim=64)
    torch.testing.assert_close(ours, expected)


def test_unsupported_rope_types_are_named():
    config = SimpleNamespace(rope_theta=10000.0, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(ConfigError, match="yarn"):
        RopeSettings.from_config(config)
