import dataclasses
import json
import shutil
from types import SimpleNamespace

import pytest

from tercet.errors import ConfigError
from tercet.model.architecture import architecture_name, choose_architecture
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.plugins.llama_architecture import LlamaArchitecture
from tercet.testing.runner_factory import installed_model_components, model_runner_for
from tercet.testing.paged_greedy import greedy_tokens

OPTIONS = dict(max_total_tokens=256, page_size=8)


def test_the_llama_family_is_a_registered_plugin():
    registry = PluginRegistries.from_plugin_manager(create_plugin_manager()).model_architectures
    assert {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"} <= set(registry.names())
    assert registry.entries["LlamaForCausalLM"].plugin_name == "llama_architecture"


def test_the_name_comes_from_the_config():
    assert architecture_name(SimpleNamespace(architectures=["Qwen2ForCausalLM"], model_type="qwen2")) == "Qwen2ForCausalLM"
    # A GGUF's config (and older config.json files) give only the model type.
    assert architecture_name(SimpleNamespace(model_type="llama")) == "LlamaForCausalLM"
    with pytest.raises(ConfigError, match="names no architecture"):
        architecture_name(SimpleNamespace(model_type="bert"))


def test_an_architecture_no_plugin_registers_is_refused_naming_the_registered():
    with pytest.raises(ConfigError, match="'GPT2LMHeadModel' is not supported; registered: LlamaForCausalLM"):
        choose_architecture(SimpleNamespace(architectures=["GPT2LMHeadModel"]), {"LlamaForCausalLM": LlamaArchitecture})


def test_a_registered_architecture_serves_a_checkpoint_that_names_it(tiny_llama_dir, tmp_path):
    renamed = tmp_path / "renamed"
    shutil.copytree(tiny_llama_dir, renamed)
    config = json.loads((renamed / "config.json").read_text())
    config["architectures"] = ["AcmeForCausalLM"]
    (renamed / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="'AcmeForCausalLM' is not supported"):
        model_runner_for(renamed, **OPTIONS)

    class Acme(LlamaArchitecture):
        pass

    components = dataclasses.replace(installed_model_components(), architectures={"AcmeForCausalLM": Acme})
    runner = model_runner_for(renamed, components=components, **OPTIONS)
    assert isinstance(runner.architecture, Acme)
    prompts = [[1, 2, 3], [9, 8, 7, 6]]
    assert greedy_tokens(runner, prompts, 5) == greedy_tokens(model_runner_for(tiny_llama_dir, **OPTIONS), prompts, 5)
