"""Detokenization with the tokenizers library's streaming decoder.

``tokenizers.decoders.DecodeStream`` keeps its own small window of ids in Rust
and returns a chunk only once it ends in a complete character, so a
multi-byte UTF-8 character cut across tokens is never shown in half. It never
flushes, though: bytes that never complete, and text that really ends in
U+FFFD, stay inside it. So each request also keeps its ids and the text
released so far, and ``finish`` returns whatever the full decode has beyond
that; the streamed pieces plus the flush are then exactly
``tokenizer.decode(ids)``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from tercet.plugin_api import hookimpl

logger = logging.getLogger(__name__)


@dataclass
class _StreamState:
    skip_special_tokens: bool
    stream: Any  # tokenizers.decoders.DecodeStream, or None once it failed
    token_ids: list[int] = field(default_factory=list)
    released: list[str] = field(default_factory=list)


class DecodeStreamDetokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.backend_tokenizer = _backend_of(tokenizer)
        self.states: dict[str, _StreamState] = {}

    def start(self, rid: str, skip_special_tokens: bool = True) -> None:
        from tokenizers.decoders import DecodeStream

        self.states[rid] = _StreamState(skip_special_tokens, DecodeStream(skip_special_tokens=skip_special_tokens))

    def append(self, rid: str, token_ids: list[int]) -> str:
        state = self.states[rid]
        state.token_ids.extend(token_ids)
        if not token_ids or state.stream is None:
            return ""
        try:
            chunk = state.stream.step(self.backend_tokenizer, list(token_ids))
        except Exception as error:  # DecodeStream rejects a window whose text changed before its end
            logger.warning("DecodeStream failed for request %s (%s); holding its text until it finishes", rid, error)
            state.stream = None
            return ""
        if not chunk:
            return ""
        state.released.append(chunk)
        return chunk

    def finish(self, rid: str) -> str:
        state = self.states.pop(rid)
        everything = self.tokenizer.decode(state.token_ids, skip_special_tokens=state.skip_special_tokens)
        released = "".join(state.released)
        if not everything.startswith(released):
            # Only a tokenizer whose decode is not prefix-stable gets here; the
            # client already has the released text, so send what follows it.
            logger.warning("streamed text of request %s is not a prefix of its full decode", rid)
        return everything[len(released):]


def _backend_of(tokenizer):
    """The Rust ``tokenizers.Tokenizer`` that DecodeStream steps: the one
    behind tercet's tokenizer (or a transformers fast one), or the tokenizer itself."""
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    if not isinstance(backend, Tokenizer):
        raise TypeError(
            f"the decode_stream detokenizer needs a fast (tokenizers-backed) tokenizer, got {type(tokenizer).__name__}"
        )
    return backend


@hookimpl
def register_detokenizers(register):
    register("decode_stream", DecodeStreamDetokenizer)
