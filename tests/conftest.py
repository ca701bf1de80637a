"""Shared fixtures. The tiny Llama, the scheduler harness and real servers come from
tercet's own pytest plugin, ``tercet.testing``; the names tercet's tests use are kept here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from device_lane import DEVICE_VARIABLE, in_cuda_lane

if not in_cuda_lane():
    # Triton kernels run on CPU tensors only in Triton's interpreter, and Triton decides that
    # when it is first imported: before any test (or library) imports it, not in one test module.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from tercet.config import load_config
from tercet.formats.default_model import find_default_gguf
from tercet.formats.gguf_file import GgufFile
from tercet.frontend.tokenizer_manager import TokenizerManager
from tercet.ipc.port_args import PortArgs
from tercet.processes.context import ProcessContext
from tercet.tokenizer.loading import load_tokenizer


def pytest_collection_modifyitems(items):
    """Skip the ``cuda`` lane, saying why, unless TERCET_TEST_DEVICE=cuda asks for it (tests/device_lane.py)."""
    if in_cuda_lane():
        import torch

        if not torch.cuda.is_available():
            raise pytest.UsageError(f"{DEVICE_VARIABLE}=cuda, but torch sees no CUDA device")
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: the cuda lane runs with {DEVICE_VARIABLE}=cuda pytest -m cuda")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def default_model_dir(tercet_default_model_dir) -> Path:
    return tercet_default_model_dir


@pytest.fixture(scope="session")
def tiny_llama_dir(tercet_tiny_llama_dir) -> Path:
    return tercet_tiny_llama_dir


@pytest.fixture(scope="session")
def tiny_adapters(tiny_llama_dir, tmp_path_factory) -> dict[str, str]:
    """Three PEFT adapters of the tiny Llama (random, non-zero A and B), by name: every projection
    (rank 4), attention only (rank 8), the MLP only (rank 2)."""
    from tercet.testing.lora_adapters import write_peft_adapter

    parent = tmp_path_factory.mktemp("tiny-adapters")
    shapes = {"every": dict(rank=4, seed=1), "attention": dict(rank=8, seed=2, targets=("q_proj", "v_proj", "o_proj")),
              "mlp": dict(rank=2, seed=3, targets=("gate_proj", "up_proj", "down_proj"))}
    return {name: str(write_peft_adapter(tiny_llama_dir, parent / name, **shape)) for name, shape in shapes.items()}


@pytest.fixture(scope="session")
def minilm_dir(tercet_minilm_dir) -> Path:
    return tercet_minilm_dir


@pytest.fixture(autouse=True, scope="session")
def _quiet_tokenizers():
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    yield


@pytest.fixture(scope="module")
def default_gguf():
    """The default model's GGUF, parsed (its tensors stay in the file until read)."""
    with GgufFile(find_default_gguf()) as parsed:
        yield parsed


@pytest.fixture
def tokenizer_manager_alone(tiny_llama_dir):
    """A real TokenizerManager on the tiny Llama with no scheduler behind it (its sends wait in ZeroMQ's queue)."""
    config = load_config(environ={}, overrides={"model": {"path": str(tiny_llama_dir)}})
    context = ProcessContext.create(config)
    port_args = PortArgs.create(context.create_transport())
    manager = TokenizerManager(context, port_args, load_tokenizer(str(tiny_llama_dir)), "tiny", 1024)
    yield manager
    manager.close()
    port_args.remove_runtime_dir()
