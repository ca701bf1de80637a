"""Loading the model's tokenizer, and the bound its vocabulary puts on a prompt's length in tokens.

:func:`load_tokenizer` reads a Hugging Face checkpoint directory or a GGUF
file into a :class:`~tercet.tokenizer.tercet_tokenizer.TercetTokenizer`, with the
tokenizers library and Jinja2 only: the API and detokenizer processes load it,
and must not import torch (nor transformers, which imports it).

Each token of a prompt stands for at most ``max_bytes_per_token`` of its UTF-8
bytes, so a prompt of B bytes is at least ceil(B / max_bytes_per_token) tokens:
a prompt too long by its size alone is refused without tokenizing it, which for
megabytes of text takes seconds. The bound only holds when no step of the
tokenizer's pipeline can shrink the text (a normalizer that strips accents, a
pre-tokenizer that drops whitespace, an unknown token that swallows a run of
characters); for any other tokenizer there is no bound and prompts are only
measured by tokenizing them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from tercet.errors import ConfigError

if TYPE_CHECKING:
    from tercet.tokenizer.tercet_tokenizer import TercetTokenizer

# Pre-tokenizers that split the text without dropping any of it.
LOSSLESS_PRE_TOKENIZERS = {"ByteLevel", "Metaspace", "Digits", "Split", "Punctuation", "UnicodeScripts"}
# The smallest unknown token's span: one character, at most 4 UTF-8 bytes.
MAX_BYTES_PER_CHARACTER = 4


def load_tokenizer(model_path: str) -> TercetTokenizer:
    """The tokenizer of a checkpoint directory or of a ``.gguf`` file."""
    path = Path(model_path).expanduser()
    if path.is_dir():
        from tercet.tokenizer.from_directory import tokenizer_from_directory

        return tokenizer_from_directory(path, str(model_path))
    if path.is_file() and path.suffix.lower() == ".gguf":
        from tercet.tokenizer.from_gguf import tokenizer_from_gguf

        return tokenizer_from_gguf(path, str(model_path))
    raise ConfigError(f"no tokenizer at {str(model_path)!r}: expected a checkpoint directory or a .gguf file")


def max_bytes_per_token(tokenizer) -> int | None:
    """The most prompt bytes one token can stand for; None when no such bound holds."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a slow (pure Python) tokenizer: nothing to inspect
        return None
    pipeline = json.loads(backend.to_str())
    model = pipeline.get("model") or {}
    pre_tokenizers = _steps(pipeline.get("pre_tokenizer"))
    added_tokens = pipeline.get("added_tokens") or []
    if not _has_a_bound(model, pipeline.get("normalizer"), pre_tokenizers, added_tokens):
        return None
    return _longest_spelling(model, pre_tokenizers, added_tokens)


def _longest_spelling(model: dict, pre_tokenizers: list[dict], added_tokens: list[dict]) -> int:
    # A byte-level vocabulary spells each byte as one character; elsewhere a
    # token's text is at least as long in UTF-8 as the text it stands for
    # (a space spelled "▁" is 3 bytes for 1).
    is_byte_level = any(step.get("type") == "ByteLevel" for step in pre_tokenizers)
    measure = len if is_byte_level else _utf8_length
    longest = max((measure(token) for token in model.get("vocab") or {}), default=0)
    longest_added = max((_utf8_length(token["content"]) for token in added_tokens), default=0)
    return max(longest, longest_added, MAX_BYTES_PER_CHARACTER if model.get("unk_token") is not None else 1)


def _has_a_bound(model: dict, normalizer: dict | None, pre_tokenizers: list[dict], added_tokens: list[dict]) -> bool:
    """Whether no step of the pipeline can let one token stand for an unbounded run of text."""
    if model.get("type") != "BPE" or not _never_shrinks(normalizer):
        return False
    if not all(_is_lossless_split(step) for step in pre_tokenizers):
        return False
    if model.get("unk_token") is not None and model.get("fuse_unk") and not model.get("byte_fallback"):
        return False  # one unknown token can stand for any run of unknown characters
    # A token that strips takes the whitespace beside it too, however long.
    return not any(token.get("lstrip") or token.get("rstrip") for token in added_tokens)


def _utf8_length(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _steps(component: dict | None) -> list[dict]:
    if component is None:
        return []
    if component.get("type") == "Sequence":
        key = "normalizers" if "normalizers" in component else "pretokenizers"
        return [step for child in component.get(key) or [] for step in _steps(child)]
    return [component]


def _never_shrinks(normalizer: dict | None) -> bool:
    """Whether the normalizer only ever adds to the text (Llama 2's prepends and
    spells spaces as "▁"); unicode normalization, lowercasing of some letters,
    stripping or replacing by a pattern can all make it shorter."""
    for step in _steps(normalizer):
        kind = step.get("type")
        if kind == "Prepend":
            continue
        if kind == "Replace":
            pattern = step.get("pattern") or {}
            if "String" in pattern and _utf8_length(step.get("content", "")) >= _utf8_length(pattern["String"]):
                continue
        return False
    return True


def _is_lossless_split(step: dict) -> bool:
    return step.get("type") in LOSSLESS_PRE_TOKENIZERS and step.get("behavior") != "Removed"
