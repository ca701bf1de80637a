"""Model runners built outside a server, for tests and benchmarks, in one line each.

A scheduler process builds its runner from its whole config
(:func:`tercet.scheduler.process.build_model_runner`); a test names only the
settings it cares about, each ``[model]`` or ``[cache]`` key by its name, the
rest keeping their defaults::

    runner = model_runner_for(tiny_llama_dir, dtype="float32", max_total_tokens=256, page_size=8)

The runner gets the parts the installed plugins register, as a server's
scheduler would, unless the test hands it others (``components``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tercet.config_sections import AttentionConfig, CacheConfig, ModelConfig, SchedulerConfig, TercetConfig
from tercet.model.chosen_components import model_components
from tercet.model.components import ModelComponents
from tercet.model.encoder_runner import EncoderRunner
from tercet.model.model_runner import ModelRunner
from tercet.model.tensor_parallel import SINGLE, TensorParallel
from tercet.processes.context import ProcessContext

CACHE_KEYS = frozenset(field.name for field in dataclasses.fields(CacheConfig))


def installed_model_components(attention_backend: str = "auto") -> ModelComponents:
    """The parts the installed plugins register, with the attention backend of that name
    (``auto``: the one the default config chooses)."""
    return model_components(ProcessContext.create(TercetConfig(attention=AttentionConfig(backend=attention_backend))))


def model_runner_for(
    model_path: str | Path, *, components: ModelComponents | None = None,
    max_running_requests: int = SchedulerConfig().max_running_requests, tp: TensorParallel = SINGLE, **settings,
) -> ModelRunner:
    """A :class:`ModelRunner` of the checkpoint at ``model_path``; ``settings`` are ``[model]``
    and ``[cache]`` keys (``dtype="float32"``, ``page_size=4``…)."""
    model, cache = _sections(model_path, settings)
    return ModelRunner(
        model, cache, components or installed_model_components(), max_running_requests=max_running_requests, tp=tp
    )


def encoder_runner_for(
    model_path: str | Path, *, components: ModelComponents | None = None, tp: TensorParallel = SINGLE, **settings
) -> EncoderRunner:
    """An :class:`EncoderRunner` of the checkpoint at ``model_path``; ``settings`` are ``[model]`` keys."""
    model = ModelConfig(path=str(model_path), **settings)
    return EncoderRunner(model, components or installed_model_components(), tp=tp)


def _sections(model_path: str | Path, settings: dict) -> tuple[ModelConfig, CacheConfig]:
    """``settings`` sorted into their sections (an unknown key is the TypeError ModelConfig raises)."""
    model_settings = {key: value for key, value in settings.items() if key not in CACHE_KEYS}
    cache = CacheConfig(**{key: value for key, value in settings.items() if key in CACHE_KEYS})
    return ModelConfig(path=str(model_path), **model_settings), cache
