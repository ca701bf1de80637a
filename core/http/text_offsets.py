"""OpenAI's ``text_offset``: where each token starts in the returned text, in characters.

Counting each token's decoded text goes wrong when a token holds only part of
a character: byte-level BPE splits "☕" (three UTF-8 bytes) into three tokens
that each decode to "�", and three "�" are two characters more than the one
"☕" of the text. So offsets are counted from the tokens' bytes, decoded the
way the text itself is: a token's offset is where the character holding its
first byte starts. A token that continues or completes a character begun in an
earlier token gets that character's start, so tokens inside one character
share an offset. That keeps offsets non-decreasing, and slicing the text
between consecutive offsets gives it back piece by piece.
"""

from __future__ import annotations

import codecs


class TextOffsets:
    """Places tokens, by their bytes, one after another in one choice's text.

    One instance follows a choice from its first token (the echoed prompt's,
    or the first generated one) to its last, across a stream's chunks, so a
    character split between two chunks is still counted once.
    """

    def __init__(self) -> None:
        # errors="replace" as the text's own decoding does, so an invalid byte
        # counts as the one "�" it becomes there.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._num_chars = 0  # characters decoded so far; a pending partial one is not yet counted

    def place(self, token_bytes: bytes) -> int:
        """The offset of a token with these bytes; the next token is placed after it."""
        if not token_bytes:
            return self._num_chars
        decoded = self._decoder.decode(token_bytes[:1])
        first_byte_is_pending = bool(self._decoder.getstate()[0])
        # The first byte either ended a character, the last one just decoded
        # (with any "�" for an earlier broken sequence before it), or it waits,
        # as part of an unfinished character, which starts after everything decoded.
        offset = self._num_chars + len(decoded) - (0 if first_byte_is_pending else 1)
        self._num_chars += len(decoded) + len(self._decoder.decode(token_bytes[1:]))
        return offset
