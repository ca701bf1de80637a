"""Incremental detokenization with an offset window.

Each request keeps two offsets into its output ids: text up to ``read_offset``
has been emitted, and decoding restarts a few tokens earlier, at
``prefix_offset``, so tokenizers whose pieces depend on their left neighbour
(leading spaces, byte-level merges) decode the same as the whole sequence
would. New text is released only when it does not end in U+FFFD, i.e. when no
multi-byte UTF-8 character is still cut in half; ``finish`` flushes whatever
is left, so text that really contains U+FFFD is still delivered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tercet.plugin_api import hookimpl

REPLACEMENT_CHARACTER = "\ufffd"


@dataclass
class _DecodeState:
    skip_special_tokens: bool
    token_ids: list[int] = field(default_factory=list)
    prefix_offset: int = 0
    read_offset: int = 0


class IncrementalDetokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.states: dict[str, _DecodeState] = {}

    def start(self, rid: str, skip_special_tokens: bool = True) -> None:
        self.states[rid] = _DecodeState(skip_special_tokens)

    def append(self, rid: str, token_ids: list[int]) -> str:
        state = self.states[rid]
        state.token_ids.extend(token_ids)
        already_read = self._decode(state, state.prefix_offset, state.read_offset)
        with_new = self._decode(state, state.prefix_offset, len(state.token_ids))
        if len(with_new) > len(already_read) and not with_new.endswith(REPLACEMENT_CHARACTER):
            state.prefix_offset = state.read_offset
            state.read_offset = len(state.token_ids)
            return with_new[len(already_read):]
        return ""

    def finish(self, rid: str) -> str:
        state = self.states.pop(rid)
        already_read = self._decode(state, state.prefix_offset, state.read_offset)
        everything = self._decode(state, state.prefix_offset, len(state.token_ids))
        return everything[len(already_read):]

    def _decode(self, state: _DecodeState, start: int, end: int) -> str:
        return self.tokenizer.decode(state.token_ids[start:end], skip_special_tokens=state.skip_special_tokens)


@hookimpl
def register_detokenizers(register):
    register("incremental", IncrementalDetokenizer)
