"""The built-in grammar backend, on llguidance (JSON Schema, regex and Lark/GBNF grammars).

llguidance builds its token trie from the served tokenizer once; a grammar
is checked when compiled and turned into a matcher per completion, whose
mask computation walks that trie (tens of microseconds a token for JSON).
Its own notion of EOS comes from the tokenizer file, which for chat models
is often not the token that ends a turn, so the model's EOS ids are allowed
here whenever the grammar may end.
"""

from __future__ import annotations

import ctypes
import json
import re
from collections import deque

import llguidance

from tercet.plugin_api import (
    MAX_ROLLBACK,
    GrammarBackend,
    GrammarError,
    GrammarMatcher,
    GrammarTokenizer,
    ReasoningFrame,
)
from tercet.plugins.llguidance_grammar.after_reasoning import after_reasoning


class LlguidanceMatcher(GrammarMatcher):
    can_roll_back = True

    def __init__(self, matcher, eos_token_ids: frozenset[int]):
        self.matcher = matcher
        self.eos_token_ids = eos_token_ids
        # Per token accept() took, newest last: whether llguidance consumed it (an EOS the
        # grammar may end with is taken here without it), so that rollback undoes just those.
        self.consumed: deque[bool] = deque(maxlen=MAX_ROLLBACK)

    def fill_bitmask(self, bitmask, row: int) -> None:
        # Straight into the row's memory (llguidance's own torch helper does the
        # same, but importing it scripts a kernel with torch.jit on every start).
        words = bitmask[row]
        self.matcher.unsafe_compute_mask_ptr(words.data_ptr(), words.numel() * words.element_size())
        if self.matcher.is_error():
            raise constraint_error(self.matcher)
        if self.matcher.is_accepting():
            for token_id in self.eos_token_ids:
                bitmask[row, token_id // 32] |= _bit(token_id % 32)

    def accept(self, token_id: int) -> bool:
        if token_id in self.eos_token_ids and self.matcher.is_accepting():
            self.consumed.append(False)
            return True
        if self.matcher.consume_token(token_id):
            self.consumed.append(True)
            return True
        # The token was one the mask allowed, so the matcher contradicts itself:
        # the request's constraint, not a fault of the server, hence a 400.
        raise constraint_error(self.matcher)

    def is_complete(self) -> bool:
        return self.matcher.is_stopped()

    def rollback(self, num_tokens: int) -> None:
        consumed = sum(self.consumed.pop() for _ in range(num_tokens))
        if consumed and not self.matcher.rollback(consumed):
            raise RuntimeError(f"llguidance could not take back {consumed} tokens: {self.matcher.get_error()}")


# llguidance's words when a grammar outgrows one of its parser or lexer limits
# (LLParserLimits: items in a row, lexer fuel, grammar size).
PARSER_LIMIT = re.compile(r"items; max is|too many items|fuel|too big \(limit", re.IGNORECASE)


def constraint_error(matcher) -> GrammarError:
    """Why ``matcher`` stopped, as the client's error. Besides a parser limit, the
    known cause is a constraint needing bytes no token of the vocabulary holds
    (SmolLM2's has no token for the byte 0xF1, which starts U+40000…U+7FFFF):
    llguidance then lets through the next byte instead."""
    problem = (matcher.get_error() or "token rejected").splitlines()[0]
    if PARSER_LIMIT.search(problem):
        return GrammarError(f"the constraint is too complex for the grammar backend's parser limits "
                            f"(llguidance: {problem})")
    return GrammarError(
        f"the constraint cannot be met with this model's vocabulary, which lacks the bytes it needs next "
        f"(llguidance: {problem})"
    )


# JSON with one space after ":" and ",", and none elsewhere, unless the schema
# says otherwise: with free whitespace a model can pad the output for as long
# as it likes (random weights do), and the output is the same JSON either way.
COMPACT_JSON = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}


def _with_compact_whitespace(text: str) -> str:
    try:
        schema = json.loads(text)
    except ValueError as error:
        raise GrammarError(f"is not valid JSON: {error}") from None
    if isinstance(schema, dict) and "x-guidance" not in schema:
        schema = {**schema, "x-guidance": COMPACT_JSON}
    return json.dumps(schema)


def _bit(position: int) -> int:
    # The bitmask holds int32 words: bit 31 is the sign bit.
    return -(1 << 31) if position == 31 else 1 << position


class LlguidanceBackend(GrammarBackend):
    def __init__(self, tokenizer: GrammarTokenizer):
        self.eos_token_ids = tokenizer.eos_token_ids
        self.tokenizer = llguidance.LLTokenizer(
            tokenizer.tokenizer_json, n_vocab=tokenizer.vocab_size,
            eos_token=min(tokenizer.eos_token_ids) if tokenizer.eos_token_ids else None,
        )

    def compile(self, kind: str, text: str):
        return self._matcher_for(self._grammar(kind, text))

    def compile_after_reasoning(self, kind: str, text: str, frame: ReasoningFrame):
        return self._matcher_for(after_reasoning(self._grammar(kind, text), frame))

    def _grammar(self, kind: str, text: str) -> str:
        """The constraint as llguidance's grammar text."""
        try:
            if kind == "json_schema":
                return llguidance.LLMatcher.grammar_from_json_schema(_with_compact_whitespace(text))
            if kind == "regex":
                return llguidance.LLMatcher.grammar_from_regex(text)
            if kind == "ebnf":
                return llguidance.grammar_from("gbnf", text)
        except GrammarError:
            raise
        except Exception as error:  # llguidance raises ValueError/RuntimeError with its reason
            raise GrammarError(f"cannot be compiled: {error}") from None
        raise GrammarError(f"unknown constraint kind {kind!r}")

    def _matcher_for(self, grammar: str):
        try:
            # The first matcher does the heavy part once, here in the worker thread;
            # each request gets a copy, which shares the lexer states it builds
            # lazily (a fresh matcher per request made every step about 4x slower).
            # Building it checks the grammar as validate_grammar would: asking
            # that first built everything twice (a third of a large schema's time).
            matcher = llguidance.LLMatcher(self.tokenizer, grammar)
        except Exception as error:
            raise GrammarError(f"cannot be compiled: {error}") from None
        if matcher.is_error():
            raise GrammarError(f"cannot be compiled: {matcher.get_error()}")
        _check_forced_start(matcher, self.tokenizer)
        return matcher

    def matcher(self, compiled) -> GrammarMatcher:
        return LlguidanceMatcher(compiled.deep_copy(), self.eos_token_ids)


def _check_forced_start(matcher, tokenizer) -> None:
    """Walk a copy through the bytes every output starts with (``{`` for a JSON
    object): a grammar too complex for the parser's limits often fails right
    there, and is better refused now than after its request was admitted."""
    walker = matcher.deep_copy()
    # The mask first: llguidance computes it without the GIL, and the forced
    # bytes are then at hand. Asked for first, they cost as much (half a second
    # for a schema of 10,000 properties) holding the GIL, stalling the scheduler's loop.
    scratch = bytearray(4 * ((tokenizer.vocab_size + 31) // 32))
    walker.unsafe_compute_mask_ptr(ctypes.addressof(ctypes.c_char.from_buffer(scratch)), len(scratch))
    forced = tokenizer.tokenize_bytes(walker.compute_ff_bytes())
    if walker.is_error() or (forced and not walker.consume_tokens(forced)):
        raise constraint_error(walker)
