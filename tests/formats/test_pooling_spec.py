"""Which pooling a folder's modules.json gives, and what [model] pooling makes of it."""

from __future__ import annotations

import json

import pytest

from tercet.errors import ConfigError
from tercet.formats.pooling_spec import Pooling, resolve_pooling

TRANSFORMER = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}
POOLING = {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
NORMALIZE = {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
MEAN = {"word_embedding_dimension": 8, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}


def folder(tmp_path, modules, pooling_config=MEAN):
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config))
    return tmp_path


def test_minilms_modules_give_normalised_mean_pooling(minilm_dir):
    assert resolve_pooling(minilm_dir, "auto") == Pooling("mean", normalize=True, source="modules.json")


@pytest.mark.parametrize("modules, mode, expected", [
    ([TRANSFORMER, POOLING], "pooling_mode_mean_tokens", Pooling("mean", False, "modules.json")),
    ([TRANSFORMER, POOLING, NORMALIZE], "pooling_mode_cls_token", Pooling("cls", True, "modules.json")),
    ([TRANSFORMER, POOLING, NORMALIZE], "pooling_mode_lasttoken", Pooling("last", True, "modules.json")),
    ([TRANSFORMER, POOLING], "pooling_mode_max_tokens", Pooling("max", False, "modules.json")),
])
def test_the_pooling_modules_mode_and_a_normalize_module_decide(tmp_path, modules, mode, expected):
    config = {"word_embedding_dimension": 8, mode: True}
    assert resolve_pooling(folder(tmp_path, modules, config), "auto") == expected


def test_a_configured_pooling_wins_over_the_folder_and_always_normalises(tmp_path):
    model_dir = folder(tmp_path, [TRANSFORMER, POOLING])
    assert resolve_pooling(model_dir, "last") == Pooling("last", True, "model.pooling")
    assert resolve_pooling(model_dir, "none") is None


def test_without_modules_json_auto_means_no_pooling(tmp_path, tiny_llama_dir):
    assert resolve_pooling(tiny_llama_dir, "auto") is None
    assert resolve_pooling(tmp_path / "model.gguf", "auto") is None
    assert resolve_pooling(tiny_llama_dir, "mean") == Pooling("mean", True, "model.pooling")


def test_a_module_tercet_does_not_run_is_refused_naming_it(tmp_path):
    dense = {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    with pytest.raises(ConfigError, match="sentence_transformers.models.Dense"):
        resolve_pooling(folder(tmp_path, [TRANSFORMER, POOLING, dense]), "auto")


@pytest.mark.parametrize("config", [
    {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True},
    {"pooling_mode_mean_sqrt_len_tokens": True},
    {},
])
def test_a_pooling_config_tercet_cannot_follow_is_refused(tmp_path, config):
    with pytest.raises(ConfigError, match="tercet pools with exactly one of"):
        resolve_pooling(folder(tmp_path, [TRANSFORMER, POOLING], config), "auto")


def test_modules_without_a_pooling_module_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="one Pooling module"):
        resolve_pooling(folder(tmp_path, [TRANSFORMER]), "auto")
