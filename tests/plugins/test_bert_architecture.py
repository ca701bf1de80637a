"""Checkpoint tensor names to the encoder's parameters, and what a checkpoint that misfits is told."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig

from tercet.errors import ConfigError
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.plugins.bert_architecture.architecture import load_bert_weights, parameter_name
from tercet.plugins.bert_architecture.encoder import BertEncoder, BertShape

CONFIG = BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
                    max_position_embeddings=8)


@pytest.mark.parametrize("checkpoint_name, place", [
    ("embeddings.word_embeddings.weight", ("word_embeddings.weight", None)),
    ("bert.embeddings.LayerNorm.bias", ("embedding_norm.bias", None)),
    ("encoder.layer.3.attention.self.key.weight", ("layers.3.qkv_proj.weight", "key")),
    ("encoder.layer.0.attention.output.LayerNorm.weight", ("layers.0.attention_norm.weight", None)),
    ("encoder.layer.5.output.dense.bias", ("layers.5.output.bias", None)),
    ("embeddings.position_ids", None),
    ("pooler.dense.weight", None),
    ("cls.predictions.bias", None),
])
def test_checkpoint_names_find_their_parameter(checkpoint_name, place):
    assert parameter_name(checkpoint_name) == place


def test_bert_is_a_registered_encoder_architecture():
    registry = PluginRegistries.from_plugin_manager(create_plugin_manager()).model_architectures
    assert registry.entries["BertModel"].plugin_name == "bert_architecture"
    assert registry.get("BertModel")().can_generate is False


def test_a_checkpoint_missing_tensors_is_refused_naming_some():
    model = BertEncoder(CONFIG, torch.float32, "cpu")
    with pytest.raises(ConfigError, match="lacks .* tensors, for example"):
        load_bert_weights(model, [("embeddings.word_embeddings.weight", torch.zeros(20, 8))])


def test_a_tensor_of_the_wrong_shape_is_refused_naming_it():
    model = BertEncoder(CONFIG, torch.float32, "cpu")
    with pytest.raises(ConfigError, match=r"embeddings.word_embeddings.weight has shape \(21, 8\)"):
        load_bert_weights(model, [("embeddings.word_embeddings.weight", torch.zeros(21, 8))])


def test_relative_position_embeddings_are_refused():
    config = BertConfig(**{**CONFIG.to_dict(), "position_embedding_type": "relative_key"})
    with pytest.raises(ConfigError, match="relative_key"):
        BertShape.from_config(config)
