"""BERT as an :class:`tercet.model.architecture.EncoderArchitecture`: building and loading the encoder.

Checkpoints name BERT's tensors as transformers' ``BertModel`` does
(``encoder.layer.0.attention.self.query.weight``…), some under a ``bert.``
prefix (a checkpoint saved from a task model). q, k and v are fused into one
projection as they load; the pooler and any task head are not used: pooling
is tercet's own (:mod:`tercet.model.pooling`).
"""

from __future__ import annotations

import torch

from tercet.plugin_api import ConfigError, EncoderArchitecture
from tercet.plugin_api.model import LoadReport
from tercet.plugins.bert_architecture.encoder import BertEncoder

# Checkpoint name (after the layer's own prefix) -> parameter of BertLayer.
LAYER_TENSORS = {
    "attention.output.dense": "attention_output",
    "attention.output.LayerNorm": "attention_norm",
    "intermediate.dense": "intermediate",
    "output.dense": "output",
    "output.LayerNorm": "output_norm",
}
EMBEDDING_TENSORS = {
    "embeddings.word_embeddings": "word_embeddings",
    "embeddings.position_embeddings": "position_embeddings",
    "embeddings.token_type_embeddings": "token_type_embeddings",
    "embeddings.LayerNorm": "embedding_norm",
}
QKV = ("query", "key", "value")
# A buffer, the pooler and task heads: nothing the encoder computes with.
UNUSED_PREFIXES = ("embeddings.position_ids", "pooler.", "cls.", "classifier.")


class BertArchitecture(EncoderArchitecture):
    def create(self, config, dtype, device) -> BertEncoder:
        return BertEncoder(config, dtype, device)

    def load_weights(self, model: BertEncoder, checkpoint) -> LoadReport:
        return load_bert_weights(model, checkpoint.tensors())


def parameter_name(checkpoint_name: str) -> tuple[str, str | None] | None:
    """The encoder's parameter a checkpoint tensor fills, and which of q, k, v it is for the
    fused ``qkv_proj`` (None for any other); None for a tensor the encoder does not use."""
    name = checkpoint_name.removeprefix("bert.")
    if name.startswith(UNUSED_PREFIXES):
        return None
    module, _, kind = name.rpartition(".")
    if module in EMBEDDING_TENSORS:
        return f"{EMBEDDING_TENSORS[module]}.{kind}", None
    prefix, _, rest = module.partition(".layer.")
    layer, _, inside = rest.partition(".")
    if prefix != "encoder" or not layer.isdigit():
        return None
    part = inside.removeprefix("attention.self.")
    if part in QKV:
        return f"layers.{layer}.qkv_proj.{kind}", part
    if inside in LAYER_TENSORS:
        return f"layers.{layer}.{LAYER_TENSORS[inside]}.{kind}", None
    return None


def load_bert_weights(model: BertEncoder, tensors) -> LoadReport:
    """Fill ``model`` from ``(checkpoint name, tensor)`` pairs; a ConfigError names what is missing or misfits."""
    parameters = dict(model.named_parameters())
    filled: set[str] = set()
    # q, k and v of a fused projection that have arrived, until all three have.
    pending: dict[str, dict[str, torch.Tensor]] = {}
    with torch.no_grad():
        for checkpoint_name, tensor in tensors:
            place = parameter_name(checkpoint_name)
            if place is None:
                continue
            name, part = place
            if part is not None:
                parts = pending.setdefault(name, {})
                parts[part] = tensor
                if len(parts) < len(QKV):
                    continue
                tensor = torch.cat([parts[part] for part in QKV])
                del pending[name]
            _copy(parameters, name, tensor, checkpoint_name)
            filled.add(name)
    missing = sorted(set(parameters) - filled)
    if missing:
        raise ConfigError(f"the BERT checkpoint lacks {len(missing)} tensors, for example {', '.join(missing[:3])}")
    report = LoadReport()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            report.count("dense")
    report.weight_bytes = sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())
    return report


def _copy(parameters: dict, name: str, tensor: torch.Tensor, checkpoint_name: str) -> None:
    parameter = parameters.get(name)
    if parameter is None:
        raise ConfigError(f"checkpoint tensor {checkpoint_name} has no place in the BERT encoder ({name})")
    if tuple(parameter.shape) != tuple(tensor.shape):
        raise ConfigError(
            f"checkpoint tensor {checkpoint_name} has shape {tuple(tensor.shape)}; the config makes it {tuple(parameter.shape)}"
        )
    parameter.copy_(tensor.to(parameter.dtype))
