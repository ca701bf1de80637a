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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotation_equals_the_reference_rotate_half_bit_for_bit(dtype):
    from transformers.models.llama.modeling_llama import rotate_half

    from tercet.model.rotary import RotaryEmbedding, apply_rotary

    head_dim, num_heads = 64, 12
    rotary = RotaryEmbedding(RopeSettings(theta=10000.0), head_dim, max_positions=512, dtype=dtype, device="cpu")
    positions = torch.tensor([0, 1, 7, 300, 511])
    # A strided view, as the model passes it: q and k columns of a wider projection.
    projection = torch.randn(len(positions), (num_heads + 3) * head_dim).to(dtype)
    x = projection[:, : num_heads * head_dim].view(-1, num_heads, head_dim)

    cos, signed_sin = rotary.cos_sin(positions)
    angles = positions[:, None].float() * inverse_frequencies(RopeSettings(theta=10000.0), head_dim)[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    reference_cos, reference_sin = angles.cos().to(dtype).unsqueeze(1), angles.sin().to(dtype).unsqueeze(1)
    expected = x * reference_cos + rotate_half(x) * reference_sin

    assert torch.equal(apply_rotary(x, cos, signed_sin), expected)
