"""The plugins' parts a model runner is built from: the attention backend, the linear methods and
the model architectures, as the factories their plugins registered.

Whoever builds a runner hands it these (a scheduler process from its plugin
registries, in :func:`tercet.model.chosen_components.model_components`; tests through
:mod:`tercet.testing.runner_factory`): the model side never looks plugins up itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tercet.model.architecture import EncoderArchitecture, ModelArchitecture
from tercet.model.attention import AttentionBackend, AttentionLayout
from tercet.model.linear_method import LinearMethod


@dataclass(frozen=True)
class ModelComponents:
    # The backend ``[attention] backend`` chooses: made once, for the model's attention layout.
    attention_backend: Callable[[AttentionLayout], AttentionBackend]
    # Every registered linear method by name: ``[model] quantization`` or the checkpoint's formats pick one per layer.
    linear_methods: Mapping[str, Callable[[], LinearMethod]]
    # Every registered architecture by the name a checkpoint's config gives.
    architectures: Mapping[str, Callable[[], ModelArchitecture | EncoderArchitecture]]
