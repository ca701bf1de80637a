"""The built-in Llama family (Llama, Mistral, Qwen2), registered as any third party would.

This module is imported in every process, so the model code (torch) is only
imported when a scheduler builds the model.
"""

from tercet.hookspecs import hookimpl

LLAMA_FAMILY = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")


def create_llama_architecture():
    from tercet.model.llama_architecture import LlamaArchitecture

    return LlamaArchitecture()


@hookimpl
def register_model_architectures(register):
    for name in LLAMA_FAMILY:
        register(name, create_llama_architecture)
