"""How a model's final hidden states become one embedding per input: the pooling and its normalisation.

A sentence-transformers folder says it in ``modules.json``: a Transformer
module, then a Pooling module (its ``config.json`` names the mode: mean of the
tokens, the first ([CLS]) token, the last token, or the maximum), then
optionally Normalize (L2). ``[model] pooling`` decides otherwise:

- ``auto`` (the default): as ``modules.json`` says; without one, no pooling,
  so a decoder only generates and ``/v1/embeddings`` is a 400 there;
- ``mean``, ``last``, ``cls``: that pooling over the final hidden states (a
  decoder's after its final norm), always L2-normalised, as llama.cpp's
  ``--pooling`` does, whatever the folder says;
- ``none``: no embeddings.

This module reads JSON only (no torch): the API process uses it too.
:mod:`tercet.model.pooling` does the arithmetic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tercet.errors import ConfigError

POOLING_METHODS = ("mean", "last", "cls", "max")
# sentence-transformers' Pooling config keys, by the method each turns on.
SENTENCE_TRANSFORMERS_MODES = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_lasttoken": "last",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
}
UNSUPPORTED_MODES = ("pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens")
TRANSFORMER_MODULE = "sentence_transformers.models.Transformer"
POOLING_MODULE = "sentence_transformers.models.Pooling"
NORMALIZE_MODULE = "sentence_transformers.models.Normalize"


@dataclass(frozen=True)
class Pooling:
    """``method`` (one of POOLING_METHODS) over each input's tokens, then an L2
    normalisation when ``normalize``; ``source`` says who decided, for messages."""

    method: str
    normalize: bool
    source: str

    def __post_init__(self):
        if self.method not in POOLING_METHODS:
            raise ConfigError(f"pooling {self.method!r} is not one of {', '.join(POOLING_METHODS)}")

    def as_dict(self) -> dict:
        return {"method": self.method, "normalize": self.normalize, "source": self.source}


def resolve_pooling(model_path: str | Path, configured: str) -> Pooling | None:
    """The pooling ``[model] pooling = configured`` gives the checkpoint at ``model_path``; None: it has none."""
    if configured == "none":
        return None
    if configured != "auto":
        return Pooling(configured, normalize=True, source="model.pooling")
    path = Path(model_path)
    modules_file = path / "modules.json"
    if not path.is_dir() or not modules_file.is_file():
        return None
    return pooling_of_modules(path, _read_json(modules_file))


def pooling_of_modules(folder: Path, modules) -> Pooling:
    """The pooling a sentence-transformers ``modules.json`` (already read) describes."""
    types = _module_types(folder / "modules.json", modules)
    pooling_module = modules[types.index(POOLING_MODULE)]
    config_file = folder / str(pooling_module.get("path", "")) / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"{config_file}, the Pooling module's config, is missing")
    normalize = NORMALIZE_MODULE in types[types.index(POOLING_MODULE):]
    return Pooling(_method_of(_read_json(config_file), config_file), normalize=normalize, source="modules.json")


def _module_types(modules_file: Path, modules) -> list[str]:
    """Each module's type, once the list is one tercet runs: a Transformer, one Pooling, maybe Normalize."""
    if not isinstance(modules, list) or not all(isinstance(module, dict) for module in modules):
        raise ConfigError(f"{modules_file} is not a list of modules")
    types = [str(module.get("type", "")) for module in modules]
    unknown = [kind for kind in types if kind not in (TRANSFORMER_MODULE, POOLING_MODULE, NORMALIZE_MODULE)]
    if unknown:
        # A Dense layer or a custom module changes the vector: serving without it would be wrong.
        raise ConfigError(
            f"{modules_file} has modules tercet does not run: {', '.join(unknown)}; "
            "supported: Transformer, Pooling, Normalize (or set model.pooling to pool the hidden states yourself)"
        )
    if types[:1] != [TRANSFORMER_MODULE] or types.count(POOLING_MODULE) != 1:
        raise ConfigError(f"{modules_file} must be a Transformer module, then one Pooling module")
    return types


def _method_of(config, config_file: Path) -> str:
    if not isinstance(config, dict):
        raise ConfigError(f"{config_file} does not hold a JSON object")
    methods = [method for key, method in SENTENCE_TRANSFORMERS_MODES.items() if config.get(key)]
    if _turns_on_unsupported_modes(config) or len(methods) != 1:
        turned_on = [key for key in (*SENTENCE_TRANSFORMERS_MODES, *UNSUPPORTED_MODES) if config.get(key)]
        raise ConfigError(
            f"{config_file} turns on {', '.join(turned_on) or 'no pooling mode'}; tercet pools with exactly one of "
            f"{', '.join(SENTENCE_TRANSFORMERS_MODES)}"
        )
    return methods[0]


def _turns_on_unsupported_modes(config: dict) -> bool:
    return any(config.get(key) for key in UNSUPPORTED_MODES)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
