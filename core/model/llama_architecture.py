"""The Llama family as a :class:`tercet.model.architecture.ModelArchitecture`."""

from __future__ import annotations

from tercet.model.architecture import ModelArchitecture
from tercet.model.llama import LlamaForCausalLM, LlamaShape
from tercet.model.weights import load_weights


class LlamaArchitecture(ModelArchitecture):
    def shape(self, config) -> LlamaShape:
        return LlamaShape.from_config(config)

    def create(self, config, dtype, device, max_positions: int, tp) -> LlamaForCausalLM:
        return LlamaForCausalLM(config, dtype, device, max_positions=max_positions, tp=tp)

    def load_weights(self, model, checkpoint, linear_methods):
        return load_weights(model, checkpoint, linear_methods)
