"""Log-probabilities in the three wire formats: OpenAI completions, OpenAI chat, SGLang's native.

Token ids become the text of each token (what ``tokenizer.decode([id])`` gives) and,
for chat, its exact bytes: byte-level BPE tokenizers (GPT-2 style, SmolLM2's)
spell every byte as one printable character, which is mapped back here, so a
token holding half of a multi-byte character still reports its real bytes.
"""

from __future__ import annotations

import math
import re
import weakref

from tercet.http.text_offsets import TextOffsets
from tercet.ipc.messages import TokenLogprobs
from tercet.tokenizer.byte_level import BYTE_LEVEL_ALPHABET

# JSON has no -Infinity; a token the model rules out entirely gets this instead.
LOWEST_LOGPROB = -9999.0
SENTENCEPIECE_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class TokenStrings:
    """Token id -> (text, UTF-8 bytes), cached: the served vocabulary is fixed."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.is_byte_level = _is_byte_level(tokenizer)
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def text(self, token_id: int) -> str:
        return self._lookup(token_id)[0]

    def bytes(self, token_id: int) -> list[int]:
        return self._lookup(token_id)[1]

    def decode(self, token_ids: list[int]) -> str:
        """A whole run of tokens as text (special tokens kept), e.g. an echoed prompt."""
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)

    def _lookup(self, token_id: int) -> tuple[str, list[int]]:
        found = self._cache.get(token_id)
        if found is None:
            found = self._cache[token_id] = self._spell(token_id)
        return found

    def _spell(self, token_id: int) -> tuple[str, list[int]]:
        text = self.tokenizer.decode([token_id], skip_special_tokens=False)
        exact = self._exact_bytes(token_id)
        if exact is None:
            return text, list(text.encode("utf-8"))
        return text, exact

    def _exact_bytes(self, token_id: int) -> list[int] | None:
        piece = self.tokenizer.convert_ids_to_tokens(token_id)
        if not isinstance(piece, str):
            return None
        if self.is_byte_level:
            try:
                return [BYTE_LEVEL_ALPHABET[char] for char in piece]
            except KeyError:  # an added token spelled outside the byte alphabet
                return None
        byte_token = SENTENCEPIECE_BYTE_TOKEN.fullmatch(piece)
        return [int(byte_token.group(1), 16)] if byte_token else None


_strings_by_tokenizer: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def token_strings_for(tokenizer) -> TokenStrings:
    """One shared :class:`TokenStrings` per tokenizer, so its cache lasts across requests."""
    try:
        strings = _strings_by_tokenizer.get(tokenizer)
        if strings is None:
            strings = _strings_by_tokenizer[tokenizer] = TokenStrings(tokenizer)
        return strings
    except TypeError:  # not weak-referenceable
        return TokenStrings(tokenizer)


def _is_byte_level(tokenizer) -> bool:
    try:
        pieces = tokenizer.convert_ids_to_tokens(tokenizer.encode(" a\n", add_special_tokens=False))
    except Exception:
        return False
    # Byte-level BPE spells the space as "Ġ" (byte 0x20 moved to U+0120) and the newline as "Ċ".
    return any(isinstance(piece, str) and ("Ġ" in piece or "Ċ" in piece) for piece in pieces)


def finite(logprob: float | None) -> float | None:
    if logprob is None:
        return None
    return float(logprob) if math.isfinite(logprob) else LOWEST_LOGPROB


# -- OpenAI /v1/completions -----------------------------------------------------


def completion_logprobs(
    strings: TokenStrings, logprobs: TokenLogprobs, num_top: int, offsets: TextOffsets | None = None
) -> dict:
    """``{tokens, token_logprobs, top_logprobs, text_offset}`` as OpenAI's legacy completions.

    ``top_logprobs`` maps token text to logprob for the ``num_top`` most likely
    tokens plus the chosen one (so up to ``num_top + 1`` entries, as OpenAI
    says); it is ``None`` where the token has no logprob (the first prompt
    token). ``text_offset`` is where each token starts in the returned text
    (the rule for tokens that split a character is :mod:`tercet.http.text_offsets`'s):
    from 0, or, given the ``offsets`` of the choice's earlier chunks, after
    them; ``offsets`` is moved past these tokens.
    """
    tokens = [strings.text(token_id) for token_id in logprobs.token_ids]
    top_logprobs: list[dict | None] = []
    for token_id, logprob, alternatives in zip(logprobs.token_ids, logprobs.logprobs, _tops(logprobs)):
        if logprob is None:
            top_logprobs.append(None)
            continue
        entry: dict[str, float] = {}
        for alternative_id, alternative_logprob in alternatives[:num_top]:
            entry.setdefault(strings.text(alternative_id), finite(alternative_logprob))
        entry.setdefault(strings.text(token_id), finite(logprob))
        top_logprobs.append(entry)
    if offsets is None:
        offsets = TextOffsets()
    return {
        "tokens": tokens,
        "token_logprobs": [finite(logprob) for logprob in logprobs.logprobs],
        "top_logprobs": top_logprobs,
        "text_offset": [offsets.place(bytes(strings.bytes(token_id))) for token_id in logprobs.token_ids],
    }


# -- OpenAI /v1/chat/completions ------------------------------------------------


def chat_logprobs(strings: TokenStrings, logprobs: TokenLogprobs, num_top: int) -> dict:
    """``{"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal": None}``."""
    content = []
    for token_id, logprob, alternatives in zip(logprobs.token_ids, logprobs.logprobs, _tops(logprobs)):
        entry = _chat_token(strings, token_id, logprob)
        entry["top_logprobs"] = [_chat_token(strings, alt_id, alt_logprob) for alt_id, alt_logprob in alternatives[:num_top]]
        content.append(entry)
    return {"content": content, "refusal": None}


def _chat_token(strings: TokenStrings, token_id: int, logprob: float | None) -> dict:
    return {"token": strings.text(token_id), "logprob": finite(logprob), "bytes": strings.bytes(token_id)}


# -- native /generate ---------------------------------------------------------


def native_token_logprobs(strings: TokenStrings | None, logprobs: TokenLogprobs) -> list[list]:
    """SGLang's ``[[logprob, token_id], ...]``, or ``[logprob, token_id, text]`` given ``strings``."""
    return [_native_entry(strings, token_id, logprob) for token_id, logprob in zip(logprobs.token_ids, logprobs.logprobs)]


def native_top_logprobs(strings: TokenStrings | None, logprobs: TokenLogprobs, num_top: int) -> list[list | None]:
    """Per token, its ``num_top`` most likely alternatives in the same form; ``None`` where it has no logprob."""
    return [
        None if logprob is None else [_native_entry(strings, alt_id, alt_logprob) for alt_id, alt_logprob in alternatives[:num_top]]
        for logprob, alternatives in zip(logprobs.logprobs, _tops(logprobs))
    ]


def _native_entry(strings: TokenStrings | None, token_id: int, logprob: float | None) -> list:
    entry = [finite(logprob), token_id]
    if strings is not None:
        entry.append(strings.text(token_id))
    return entry


def _tops(logprobs: TokenLogprobs) -> list[list]:
    # ``top`` may be shorter (or empty) when no alternatives were asked for.
    tops = list(logprobs.top or [])
    return tops + [[]] * (len(logprobs.token_ids) - len(tops))
