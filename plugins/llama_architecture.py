"""The built-in Llama family (Llama, Mistral, Qwen2), registered as any third party would.

This module is imported in every process, so the model code (torch) is only
imported when a scheduler builds the model.
"""

from tercet.plugin_api import ModelArchitecture, hookimpl

LLAMA_FAMILY = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")


class LlamaArchitecture(ModelArchitecture):
    """tercet's own Llama decoder over the paged KV cache, loaded with fused q/k/v and gate/up."""

    def shape(self, config):
        from tercet.plugin_api.model import LlamaShape

        return LlamaShape.from_config(config)

    def create(self, config, dtype, device, max_positions: int, tp):
        from tercet.plugin_api.model import LlamaForCausalLM

        return LlamaForCausalLM(config, dtype, device, max_positions=max_positions, tp=tp)

    def load_weights(self, model, checkpoint, linear_methods):
        from tercet.plugin_api.model import load_weights

        return load_weights(model, checkpoint, linear_methods)


@hookimpl
def register_model_architectures(register):
    for name in LLAMA_FAMILY:
        register(name, LlamaArchitecture)
