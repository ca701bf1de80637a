"""model_runner_for: a model runner alone, each setting in its config section, the installed plugins' parts."""

import dataclasses

import pytest
import torch

from tercet.testing.runner_factory import installed_model_components, model_runner_for


def test_settings_go_to_their_sections(tiny_llama_dir):
    runner = model_runner_for(tiny_llama_dir, dtype="float32", page_size=4, max_total_tokens=64, max_running_requests=3)
    assert (runner.dtype, runner.page_size, runner.max_total_tokens) == (torch.float32, 4, 64)
    assert runner.req_to_token_pool.table.shape[0] == 3


def test_a_setting_of_no_section_is_refused(tiny_llama_dir):
    with pytest.raises(TypeError, match="page_sizes"):
        model_runner_for(tiny_llama_dir, page_sizes=4)


def test_the_runner_is_built_from_the_components_it_is_handed(tiny_llama_dir):
    backends = []

    def recording_backend(layout):
        backends.append(layout)
        return installed_model_components().attention_backend(layout)

    components = dataclasses.replace(installed_model_components(), attention_backend=recording_backend)
    runner = model_runner_for(tiny_llama_dir, components=components, max_total_tokens=64)
    assert backends == [runner.model.attention_layout()]
