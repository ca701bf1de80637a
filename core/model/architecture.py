"""Model architectures, a plugin kind: how a checkpoint's model is built and loaded.

A checkpoint names its architecture in ``config.json``'s ``architectures``
(``"LlamaForCausalLM"``, ``"Qwen2ForCausalLM"``…); the plugin registered
under that name serves it. A GGUF file's metadata names its family the same
way (``general.architecture = llama`` is ``LlamaForCausalLM``).

The model an architecture makes runs over the paged KV cache as the built-in
Llama does (:class:`tercet.model.llama.LlamaForCausalLM`): ``attach(backend,
kv_cache)``, ``forward(batch)`` giving float32 logits of each sequence's last
new token, ``forward_with_prompt_logits(batch, sequence_indices)``,
``attention_layout()`` (this rank's heads), and ``shards`` (its
:class:`tercet.model.tensor_parallel.LlamaShards`). A decoder's model may also
give ``final_hidden_states(batch)``, ``[T, hidden]`` after its final norm: then
it can serve embeddings too, pooled as ``[model] pooling`` says.

An encoder-only model (BERT) is an :class:`EncoderArchitecture`: it cannot
generate, has no KV cache, and gives the final hidden states of a batch of
whole sequences, which are pooled into embeddings.

What an architecture's models can do is declared by ``can_generate``; the
scheduler reports it, and the API refuses what the model cannot do.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from tercet.errors import ConfigError

# Configs that do not list their architectures (older files) are known by their model type.
ARCHITECTURE_OF_MODEL_TYPE = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}


class ModelArchitecture(ABC):
    """A decoder, generating over the paged KV cache."""

    can_generate: ClassVar[bool] = True

    @abstractmethod
    def shape(self, config):
        """The model's sizes (a :class:`tercet.model.llama.LlamaShape`, or an object with its fields):
        what sizes the KV pool and splits the model over tensor-parallel ranks."""

    @abstractmethod
    def create(self, config, dtype, device, max_positions: int, tp):
        """The model, its weights not loaded yet (placeholders on the meta device are fine)."""

    @abstractmethod
    def load_weights(self, model, checkpoint, linear_methods):
        """Fill ``model`` from ``checkpoint`` (:class:`tercet.formats.checkpoint.Checkpoint`), each linear
        layer made by the method ``linear_methods`` (:class:`tercet.model.weights.LinearMethodChoice`)
        names; return a :class:`tercet.model.weights.LoadReport`. Raise ConfigError for what is wrong."""


class EncoderArchitecture(ABC):
    """An encoder-only model: embeddings of whole sequences, no generation, no KV cache.

    Its model's ``forward(input_ids, seq_lens)`` takes a batch's token ids
    flattened (``[T]`` int64, ``seq_lens`` tokens each, sequence after sequence)
    and gives the final hidden states ``[T, hidden]``, each sequence attending
    to all of itself and nothing else; the model also tells its ``hidden_size``
    and ``max_positions`` (the longest sequence it takes).
    """

    can_generate: ClassVar[bool] = False

    @abstractmethod
    def create(self, config, dtype, device):
        """The model, its weights not loaded yet."""

    @abstractmethod
    def load_weights(self, model, checkpoint):
        """Fill ``model`` from ``checkpoint`` (:class:`tercet.formats.checkpoint.Checkpoint`); return a
        :class:`tercet.model.weights.LoadReport`. Raise ConfigError for what is wrong."""


def architecture_name(config) -> str:
    """The architecture a checkpoint's config names."""
    architectures = getattr(config, "architectures", None)
    if architectures:
        return architectures[0]
    model_type = getattr(config, "model_type", None)
    if model_type in ARCHITECTURE_OF_MODEL_TYPE:
        return ARCHITECTURE_OF_MODEL_TYPE[model_type]
    raise ConfigError(f"the checkpoint's config names no architecture (model type {model_type!r})")


def choose_architecture(config, architectures) -> ModelArchitecture | EncoderArchitecture:
    """The registered architecture serving ``config``; ``architectures`` maps names to factories."""
    name = architecture_name(config)
    if name not in architectures:
        raise ConfigError(
            f"model architecture {name!r} is not supported; registered: {', '.join(sorted(architectures))} "
            "(a plugin adds one through register_model_architectures)"
        )
    return architectures[name]()
