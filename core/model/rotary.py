"""Rotary position embeddings for the Llama family, precomputed for every position.

Matches Hugging Face's arithmetic (inverse frequencies in float32, cos/sin cast
to the model dtype, the rotate-half convention) so float32 outputs agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tercet.errors import ConfigError

SUPPORTED_ROPE_TYPES = ("default", "llama3")


@dataclass(frozen=True)
class RopeSettings:
    theta: float
    rope_type: str = "default"
    scaling: dict | None = None

    @classmethod
    def from_config(cls, config) -> RopeSettings:
        """Read transformers 5 ``rope_parameters`` or the older ``rope_theta`` + ``rope_scaling``."""
        parameters = getattr(config, "rope_parameters", None)
        if isinstance(parameters, dict) and "rope_theta" in parameters:
            scaling = dict(parameters)
            theta = scaling.pop("rope_theta")
        else:
            theta = getattr(config, "rope_theta", 10000.0)
            scaling = dict(getattr(config, "rope_scaling", None) or {})
        rope_type = scaling.pop("rope_type", None) or scaling.pop("type", None) or "default"
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise ConfigError(
                f"rope_type {rope_type!r} is not supported by tercet's Llama model; "
                f"supported: {', '.join(SUPPORTED_ROPE_TYPES)}"
            )
        return cls(theta=float(theta), rope_type=rope_type, scaling=scaling or None)


def inverse_frequencies(settings: RopeSettings, head_dim: int) -> torch.Tensor:
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (settings.theta**exponents)
    if settings.rope_type == "llama3":
        inv_freq = _llama3_scaled(inv_freq, settings.scaling or {})
    return inv_freq


def _llama3_scaled(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    """Llama 3.1 long-context scaling: slow down low frequencies, keep high ones, blend between."""
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    original_context = scaling["original_max_position_embeddings"]
    low_freq_wavelen = original_context / low_freq_factor
    high_freq_wavelen = original_context / high_freq_factor

    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding:
    """cos/sin tables ``[max_positions, head_dim]``, gathered by position once per step.

    The sine table is stored with the rotate-half sign folded in (its first
    half negated), so :func:`apply_rotary` needs no negation: ``-x2 * sin``
    and ``x2 * -sin`` are the same float, bit for bit.
    """

    def __init__(self, settings: RopeSettings, head_dim: int, max_positions: int, dtype, device):
        inv_freq = inverse_frequencies(settings, head_dim).to(device)
        positions = torch.arange(max_positions, dtype=torch.float32, device=device)
        freqs = positions[:, None] * inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        self.cos_table = angles.cos().to(dtype)
        sin = angles.sin().to(dtype)
        half = head_dim // 2
        self.signed_sin_table = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin for each token, shaped ``[T, 1, head_dim]`` to broadcast over heads."""
        return self.cos_table[positions].unsqueeze(1), self.signed_sin_table[positions].unsqueeze(1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[T, heads, head_dim]`` by the rotate-half convention.

    Equal, bit for bit, to the reference ``x * cos + cat(-x2, x1) * sin``, in
    four computing ops instead of five (neg, cat, two muls, add): swapping the
    halves is one ``flip`` of a ``[.., 2, head_dim / 2]`` view, and the sign
    lives in ``signed_sin``.
    Call it once on q and k together (they are adjacent in the fused projection).
    """
    tokens, heads, head_dim = x.shape
    swapped = x.reshape(tokens, heads, 2, head_dim // 2).flip(2).view(tokens, heads, head_dim)
    return x * cos + swapped * signed_sin
