"""The parts a runner is built from, as a process's config chooses them among its plugins."""

from __future__ import annotations

from tercet.config_sections import AttentionConfig, ModelConfig, TercetConfig
from tercet.model.chosen_components import model_components
from tercet.plugin_host.manager import create_plugin_manager
from tercet.processes.context import ProcessContext


def context_of(backend: str, disabled: tuple[str, ...] = ()) -> ProcessContext:
    config = TercetConfig(model=ModelConfig(device="cpu"), attention=AttentionConfig(backend=backend))
    return ProcessContext.create(config, create_plugin_manager(disabled=disabled))


def test_auto_is_the_built_in_backend_of_the_device_and_falls_back_when_it_is_disabled():
    on_cpu = context_of("auto")
    assert model_components(on_cpu).attention_backend is on_cpu.registries.attention_backends.get("paged_cpu")
    without = context_of("auto", disabled=("paged_cpu_attention",))
    assert model_components(without).attention_backend is without.registries.attention_backends.get("torch_native")


def test_a_named_backend_and_every_registered_method_and_architecture_are_handed_over():
    context = context_of("torch_native")
    components = model_components(context)
    assert components.attention_backend is context.registries.attention_backends.get("torch_native")
    assert components.linear_methods == context.registries.linear_methods.factories()
    assert components.architectures == context.registries.model_architectures.factories()
