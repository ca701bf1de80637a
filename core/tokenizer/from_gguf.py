"""A tokenizer from a GGUF file's metadata, equal to the one transformers converts from it.

A GGUF carries no ``tokenizer.json``: llama.cpp's keys give the vocabulary
(``tokenizer.ggml.tokens``), the merges, each token's type, the special
token ids, ``add_bos_token`` / ``add_eos_token`` and the chat template. For a
byte-level BPE vocabulary (``tokenizer.ggml.model = "gpt2"``) the pipeline is
GPT-2's: byte-level pre-tokenizer (GPT-2's split), BPE, byte-level decoder.
What transformers adds on top, and so do we:

- a token spelled outside the byte alphabet is respelled in it (its UTF-8
  bytes, one character each), so BPE can reach it;
- control tokens (type 3) become special added tokens, matched whole in text
  and skipped by ``decode(skip_special_tokens=True)``; one spelled outside the
  byte alphabet is a mislabel and stays an ordinary token;
- user-defined tokens (type 4, ``<think>``) become ordinary added tokens;
- the post-processor adds BOS / EOS as the two flags say.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

from tercet.errors import ConfigError
from tercet.tokenizer.byte_level import BYTE_LEVEL_ALPHABET, spell_in_byte_level
from tercet.tokenizer.from_directory import tokenizer_from_directory
from tercet.tokenizer.tercet_tokenizer import TercetTokenizer

CONTROL_TOKEN, USER_DEFINED_TOKEN = 3, 4
# tokenizer.ggml.pre values whose vocabulary was learned on GPT-2's split (or
# that transformers splits that way): others need a split tercet does not know.
GPT2_SPLIT_PRE_TOKENIZERS = {None, "default", "gpt-2", "gpt2", "smollm"}
SPECIAL_TOKEN_IDS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}


def tokenizer_from_gguf(path: Path, name_or_path: str) -> TercetTokenizer:
    """The GGUF's tokenizer, converted once into a cached tokenizer directory.

    Converting takes about 0.4 s and numpy, and leaves the vocabulary's
    Python strings behind in the heap (some 20 MB per process); loading the
    cached ``tokenizer.json`` takes 0.1 s in Rust, and each of the server's
    processes loads it.
    """
    from tercet.tokenizer.gguf_cache import conversion_lock, find_cached_tokenizer, store_cached_tokenizer

    directory = find_cached_tokenizer(path)
    if directory is None:
        # The server's processes start together: one converts, the others wait for its entry
        # instead of converting it too on the same cores.
        with conversion_lock(path):
            directory = find_cached_tokenizer(path)
            if directory is None:
                files = tokenizer_files(path)
                directory = store_cached_tokenizer(path, files)
                if directory is None:  # the cache cannot be written: use the conversion as it is
                    return tokenizer_from_files(files, name_or_path)
    return tokenizer_from_directory(directory, name_or_path)


def tokenizer_files(path: Path) -> dict[str, str]:
    """The GGUF's tokenizer as the files of a checkpoint directory (name -> text)."""
    from tercet.formats.gguf_file import GgufFile

    with GgufFile(path) as gguf:
        metadata = gguf.metadata
    pipeline, special_tokens = tokenizer_pipeline(metadata, str(path))
    files = {
        "tokenizer.json": json.dumps(pipeline, ensure_ascii=False),
        "tokenizer_config.json": json.dumps(special_tokens, ensure_ascii=False, indent=2),
    }
    chat_template = metadata.get("tokenizer.chat_template")
    if isinstance(chat_template, str):
        files["chat_template.jinja"] = chat_template
    return files


def tokenizer_from_files(files: dict[str, str], name_or_path: str) -> TercetTokenizer:
    return TercetTokenizer(
        Tokenizer.from_str(files["tokenizer.json"]),
        name_or_path=name_or_path,
        special_tokens=json.loads(files["tokenizer_config.json"]),
        chat_template=files.get("chat_template.jinja"),
    )


def tokenizer_pipeline(metadata: dict, where: str) -> tuple[dict, dict[str, str]]:
    """``(tokenizer.json as a dict, named special tokens)`` for the GGUF's metadata."""
    _check_supported(metadata, where)
    tokens = _string_list(metadata, "tokenizer.ggml.tokens", where)
    merges = _string_list(metadata, "tokenizer.ggml.merges", where)
    vocab = {token if _in_alphabet(token) else spell_in_byte_level(token): index for index, token in enumerate(tokens)}
    special_tokens = _named_special_tokens(metadata, tokens, where)
    added = _added_tokens(tokens, metadata.get("tokenizer.ggml.token_type") or [], vocab, special_tokens)
    add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", False)) and "bos_token" in special_tokens
    add_eos = bool(metadata.get("tokenizer.ggml.add_eos_token", False)) and "eos_token" in special_tokens
    pipeline = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": token_id, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": special}
            for token, (token_id, special) in sorted(added.items(), key=lambda item: item[1][0])
        ],
        "normalizer": None,
        # tokenizer.ggml.add_space_prefix is a sentencepiece setting: llama.cpp and transformers
        # both leave byte-level vocabularies without a prefix space.
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": _post_processor(special_tokens, added, add_bos, add_eos),
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": vocab, "merges": [_merge_pair(merge, where) for merge in merges],
        },
    }
    return pipeline, special_tokens


def _check_supported(metadata: dict, where: str) -> None:
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ConfigError(
            f"{where}: tercet reads only byte-level BPE tokenizers (tokenizer.ggml.model 'gpt2') from a GGUF, "
            f"not {kind!r}; serve a Hugging Face checkpoint directory instead"
        )
    pre = metadata.get("tokenizer.ggml.pre")
    if pre not in GPT2_SPLIT_PRE_TOKENIZERS:
        raise ConfigError(f"{where}: tokenizer.ggml.pre {pre!r} needs a pre-tokenizer split tercet does not know")


def _named_special_tokens(metadata: dict, tokens: list[str], where: str) -> dict[str, str]:
    """``bos_token`` and the others the metadata names by id, as their text."""
    special_tokens = {}
    for name, key in SPECIAL_TOKEN_IDS.items():
        token_id = metadata.get(key)
        if token_id is None:
            continue
        if not isinstance(token_id, int) or not 0 <= token_id < len(tokens):
            raise ConfigError(f"{where}: {key} = {token_id!r} is not a token id")
        special_tokens[name] = tokens[token_id]
    return special_tokens


def _added_tokens(tokens: list[str], token_types: list, vocab: dict[str, int],
                  special_tokens: dict[str, str]) -> dict[str, tuple[int, bool]]:
    """Tokens matched whole in text: ``content -> (id, special)``, as transformers' conversion adds them."""
    added: dict[str, tuple[int, bool]] = {}
    for token, token_type in zip(tokens, token_types):
        if token_type == CONTROL_TOKEN and _in_alphabet(token):
            added.setdefault(token, (vocab[token], True))
    for token, token_type in zip(tokens, token_types):
        if token_type == USER_DEFINED_TOKEN and token in vocab:
            added.setdefault(token, (vocab[token], False))
    next_id = len(tokens)
    for token in special_tokens.values():
        if token not in added:
            # Spelled outside the alphabet, it is not in the vocabulary: it gets a new id.
            token_id = vocab.get(token)
            if token_id is None:
                token_id, next_id = next_id, next_id + 1
            added[token] = (token_id, True)
    return added


def _post_processor(special_tokens: dict, added: dict, add_bos: bool, add_eos: bool) -> dict:
    """TemplateProcessing: ``[BOS] $A [EOS]`` for one sequence, each flag deciding its token."""

    def piece(token: str, type_id: int) -> dict:
        return {"SpecialToken": {"id": token, "type_id": type_id}}

    def sequence(name: str, type_id: int) -> dict:
        return {"Sequence": {"id": name, "type_id": type_id}}

    def around(name: str, type_id: int) -> list[dict]:
        return [
            *([piece(special_tokens["bos_token"], type_id)] if add_bos else []),
            sequence(name, type_id),
            *([piece(special_tokens["eos_token"], type_id)] if add_eos else []),
        ]

    used = [special_tokens[name] for name, flag in (("bos_token", add_bos), ("eos_token", add_eos)) if flag]
    return {
        "type": "TemplateProcessing",
        "single": around("A", 0),
        "pair": around("A", 0) + around("B", 1),
        "special_tokens": {token: {"id": token, "ids": [added[token][0]], "tokens": [token]} for token in used},
    }


def _in_alphabet(token: str) -> bool:
    return _ALPHABET_SET.issuperset(token)  # in C: 49k tokens are checked at a conversion


_ALPHABET_SET = frozenset(BYTE_LEVEL_ALPHABET)


def _string_list(metadata: dict, key: str, where: str) -> list[str]:
    value = metadata.get(key)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: {key} is missing or not a list of strings")
    return value


def _merge_pair(merge: str, where: str) -> list[str]:
    left, space, right = merge.partition(" ")
    if not space or not left or not right:
        raise ConfigError(f"{where}: the merge {merge!r} is not two tokens joined by a space")
    return [left, right]
