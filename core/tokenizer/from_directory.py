"""A tokenizer from a Hugging Face checkpoint directory, read as transformers (5.x) reads it.

- ``tokenizer.json``: the whole pipeline (required: tercet has no slow tokenizers);
- ``tokenizer_config.json``: the named special tokens, extra special tokens,
  ``added_tokens_decoder``, ``clean_up_tokenization_spaces`` and the chat
  template;
- ``special_tokens_map.json``: the special tokens of older checkpoints, used
  (as by transformers) only when the config has no ``added_tokens_decoder``;
- ``chat_template.jinja`` (and ``additional_chat_templates/*.jinja``), which
  take precedence over the config's template, and ``chat_template.json``
  (a processor's), used only when nothing else gives one.

The file's padding and truncation settings are dropped, as transformers'
calls drop them by default.

``add_bos_token`` and ``add_eos_token`` are left to ``tokenizer.json``'s
post-processor, which already says which tokens encoding adds; transformers
5 ignores the two flags when a ``tokenizer.json`` is there too.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer

from tercet.errors import ConfigError
from tercet.tokenizer.tercet_tokenizer import STANDARD_SPECIAL_TOKENS, TercetTokenizer

ADDED_TOKEN_FIELDS = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")


def tokenizer_from_directory(directory: Path, name_or_path: str) -> TercetTokenizer:
    tokenizer_file = directory / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise ConfigError(f"{directory} has no tokenizer.json; tercet needs a fast (tokenizers library) tokenizer")
    backend = Tokenizer.from_file(str(tokenizer_file))
    # A tokenizer.json may fix padding and truncation (all-MiniLM-L6-v2's pads
    # and cuts every text to 128 tokens). transformers applies them only when a
    # call asks; tercet never does: a prompt is its own tokens, and one too long
    # is refused, not cut.
    backend.no_padding()
    backend.no_truncation()
    config = _read_json(directory / "tokenizer_config.json")
    named, extra = _special_tokens(config)
    if "added_tokens_decoder" not in config:
        _merge_legacy_special_tokens(_read_json(directory / "special_tokens_map.json"), named, extra)
    _add_missing_tokens(backend, config.get("added_tokens_decoder") or {}, named, extra)
    return TercetTokenizer(
        backend,
        name_or_path=name_or_path,
        special_tokens={name: _content(value) for name, value in named.items()},
        extra_special_tokens=tuple(_content(value) for value in extra),
        chat_template=_chat_template(directory, config),
        clean_up_tokenization_spaces=bool(config.get("clean_up_tokenization_spaces", False)),
    )


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return loaded


def _is_token(value) -> bool:
    return isinstance(value, str) or (isinstance(value, dict) and isinstance(value.get("content"), str))


def _content(value: str | dict) -> str:
    return value if isinstance(value, str) else value["content"]


def _special_tokens(config: dict) -> tuple[dict[str, str | dict], list[str | dict]]:
    """The named special tokens (standard ones first) and the extra ones, as the config spells them."""
    named = {name: config[name] for name in STANDARD_SPECIAL_TOKENS if _is_token(config.get(name))}
    # Model-specific names (``image_token``, ...) are any other ``*_token`` key holding a token.
    named.update({key: value for key, value in config.items() if _is_model_specific_token(key, value, named)})
    extra_value = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    if isinstance(extra_value, dict):  # extra tokens with names of their own
        named.update(_tokens_only(extra_value))
        return named, []
    return named, [value for value in extra_value if _is_token(value)]


def _tokens_only(values: dict) -> dict:
    return {key: value for key, value in values.items() if _is_token(value)}


def _is_model_specific_token(key: str, value, named: dict) -> bool:
    return key.endswith("_token") and key not in named and key not in STANDARD_SPECIAL_TOKENS and _is_token(value)


def _merge_legacy_special_tokens(special_tokens_map: dict, named: dict, extra: list) -> None:
    for key, value in special_tokens_map.items():
        if key in ("additional_special_tokens", "extra_special_tokens") and isinstance(value, list):
            known = {_content(token) for token in extra}
            extra.extend(token for token in value if _is_token(token) and _content(token) not in known)
        elif key.endswith("_token") and _is_token(value):
            named[key] = value


def _add_missing_tokens(backend: Tokenizer, added_tokens_decoder: dict, named: dict, extra: list) -> None:
    """Add what the config declares but tokenizer.json lacks as added tokens.

    The named and extra special tokens become special added tokens even when
    the base vocabulary has them: then they are matched whole in text and
    skipped by ``decode(skip_special_tokens=True)``, as with transformers.
    """
    present = {token.content for token in backend.get_added_tokens_decoder().values()}
    missing: list[AddedToken] = []
    for _, fields in sorted(added_tokens_decoder.items(), key=lambda item: int(item[0])):
        if isinstance(fields, dict) and isinstance(fields.get("content"), str) and fields["content"] not in present:
            missing.append(_added_token(fields, special=bool(fields.get("special", False))))
            present.add(fields["content"])
    for value in [*named.values(), *extra]:
        if _content(value) not in present:
            missing.append(_added_token(value, special=True))
            present.add(_content(value))
    if missing:
        backend.add_tokens(missing)


def _added_token(value: str | dict, special: bool) -> AddedToken:
    if isinstance(value, str):
        return AddedToken(value, special=special, normalized=not special)
    options = {field: value[field] for field in ADDED_TOKEN_FIELDS[1:-1] if isinstance(value.get(field), bool)}
    options.setdefault("normalized", not special)
    return AddedToken(value["content"], special=special, **options)


def _chat_template(directory: Path, config: dict) -> str | dict[str, str] | None:
    templates = _template_files(directory)
    if not templates:
        return _configured_template(directory, config)
    if list(templates) == ["default"]:
        return templates["default"]
    return templates


def _template_files(directory: Path) -> dict[str, str]:
    """``chat_template.jinja`` (as "default") and ``additional_chat_templates/*.jinja`` by name."""
    templates: dict[str, str] = {}
    main_file = directory / "chat_template.jinja"
    if main_file.is_file():
        templates["default"] = main_file.read_text(encoding="utf-8")
    extra_dir = directory / "additional_chat_templates"
    if extra_dir.is_dir():
        for path in sorted(extra_dir.glob("*.jinja")):
            templates[path.stem] = path.read_text(encoding="utf-8")
    return templates


def _configured_template(directory: Path, config: dict) -> str | dict[str, str] | None:
    """The config's template (a source or named sources), else a processor's chat_template.json."""
    from_config = config.get("chat_template")
    if isinstance(from_config, str):
        return from_config
    if isinstance(from_config, list):  # [{"name": ..., "template": ...}]
        return {entry["name"]: entry["template"] for entry in from_config if isinstance(entry, dict)}
    from_processor = _read_json(directory / "chat_template.json").get("chat_template")
    return from_processor if isinstance(from_processor, str) else None
