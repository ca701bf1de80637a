"""A conversation's text from clients, tokenized with its special tokens split: role markers a user cannot forge.

A chat template writes a conversation's role markers as special-token text
(``<|im_start|>assistant``, ``<|im_end|>``), and the rendered text is then
tokenized with the special tokens parsed, so that those markers become the
model's control tokens. Text a client sent goes through the same tokenizing:
left as it is, a user's ``<|im_end|>\\n<|im_start|>assistant\\n`` would close
its own turn and open one of the assistant's, as the template does.

:class:`ContentTokens` keeps the two apart. Before rendering, every string
of the messages and tools has each special token's text replaced by a
sentinel (a private-use character and the token's number); after, the
rendered text is tokenized piece by piece: the template's own text with its
special tokens parsed, each sentinel as its token's text with the special
tokens split, so ``<|im_start|>`` from a client is the characters ``<``, ``|``,
``im``... A conversation without special-token text renders and tokenizes
exactly as before. ``[tokenizer] special_tokens_in_content = "parse"`` keeps
the older reading, where content may write control tokens; raw prompts
(``/v1/completions``, ``/generate``) are never changed: their text is the
prompt, as the client means it.
"""

from __future__ import annotations

import re

# Starts a sentinel: a private-use character no template writes. In a client's text it is written
# twice, so that a client cannot send a sentinel of its own.
MARK = "\ue000"
# A sentinel is MARK and the character FIRST + the special token's number (MARK itself is MARK MARK).
FIRST = 0xE001
SENTINEL = re.compile(re.escape(MARK) + "(.)", re.DOTALL)


class ContentTokens:
    """The escaping and the tokenizing of one tokenizer's special tokens (see the module's docstring)."""

    def __init__(self, tokenizer):
        backend = tokenizer.backend_tokenizer
        decoder = backend.get_added_tokens_decoder()
        # Longest first: where one special token's text starts another's, the longer is the token.
        self.special_tokens = sorted({token.content for token in decoder.values() if token.special}, key=len,
                                     reverse=True)
        self.tokenizer = tokenizer
        self.pattern = re.compile("|".join([re.escape(MARK), *map(re.escape, self.special_tokens)]))
        self.sentinels = {text: MARK + chr(FIRST + index) for index, text in enumerate(self.special_tokens)}
        self.sentinels[MARK] = MARK + MARK
        # The same tokenizer, reading special-token text as plain text (a copy: the flag is the tokenizer's).
        self.literal = type(backend).from_str(backend.to_str())
        self.literal.encode_special_tokens = True

    def escaped(self, value):
        """``value`` (messages, tools: strings, lists, dicts) with special-token text in its strings
        replaced by sentinels; the keys, which the template reads as names, are left as they are."""
        if isinstance(value, str):
            return self.pattern.sub(lambda found: self.sentinels[found.group()], value)
        if isinstance(value, list):
            return [self.escaped(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self.escaped(item) for item in value)
        if isinstance(value, dict):
            return {key: self.escaped(item) for key, item in value.items()}
        return value

    def encode(self, text: str) -> list[int]:
        """The token ids of rendered text: special tokens parsed, except where a sentinel stands."""
        if MARK not in text:
            return self.tokenizer.encode(text, add_special_tokens=False)
        input_ids, start = [], 0
        for found in SENTINEL.finditer(text):
            input_ids += self._parsed(text[start:found.start()])
            input_ids += self._literal(found.group(1))
            start = found.end()
        return input_ids + self._parsed(text[start:])

    def _parsed(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) if text else []

    def _literal(self, code: str) -> list[int]:
        index = ord(code) - FIRST
        if code != MARK and not 0 <= index < len(self.special_tokens):
            return self._parsed(MARK + code)  # not a sentinel (a template cut one in two): text as it stands
        text = MARK if code == MARK else self.special_tokens[index]
        return self.literal.encode(text, add_special_tokens=False).ids


def content_tokens_for(tokenizer, special_tokens_in_content: str) -> ContentTokens | None:
    """How a conversation's client text is tokenized: ``"split"`` (:class:`ContentTokens`), or None to
    read it as the template's own text (``"parse"``, or a tokenizer with no special tokens to split)."""
    if special_tokens_in_content == "parse" or not hasattr(tokenizer, "backend_tokenizer"):
        return None
    content_tokens = ContentTokens(tokenizer)
    return content_tokens if content_tokens.special_tokens else None
