"""Adapters of the tiny Llama, made once per session by PEFT (random, non-zero A and B)."""

from __future__ import annotations

import pytest

from tercet.testing.lora_adapters import write_peft_adapter


@pytest.fixture(scope="session")
def tiny_adapters(tiny_llama_dir, tmp_path_factory) -> dict[str, str]:
    """Three adapters: every projection (rank 4), attention only (rank 8), and the MLP only (rank 2)."""
    parent = tmp_path_factory.mktemp("tiny-adapters")
    shapes = {"every": dict(rank=4, seed=1), "attention": dict(rank=8, seed=2, targets=("q_proj", "v_proj", "o_proj")),
              "mlp": dict(rank=2, seed=3, targets=("gate_proj", "up_proj", "down_proj"))}
    return {name: str(write_peft_adapter(tiny_llama_dir, parent / name, **shape)) for name, shape in shapes.items()}
