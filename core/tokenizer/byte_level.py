"""The byte-level alphabet of GPT-2 style BPE vocabularies.

Byte-level BPE spells every byte as one printable character: the printable
Latin-1 characters stand for themselves, and the other bytes (controls, space,
a few Latin-1 gaps) are moved past U+00FF, in order. So a space is "Ġ"
(U+0120) and a newline "Ċ" (U+010A).
"""

from __future__ import annotations


def byte_level_characters() -> dict[int, str]:
    """The character that spells each byte value (byte -> character)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars_by_byte = {byte: chr(byte) for byte in printable}
    shifted = (byte for byte in range(256) if byte not in chars_by_byte)
    for offset, byte in enumerate(shifted):
        chars_by_byte[byte] = chr(256 + offset)
    return chars_by_byte


def byte_level_alphabet() -> dict[str, int]:
    """The byte each character of the alphabet stands for (character -> byte)."""
    return {char: byte for byte, char in byte_level_characters().items()}


BYTE_LEVEL_ALPHABET = byte_level_alphabet()


def spell_in_byte_level(text: str) -> str:
    """``text``'s UTF-8 bytes, each written as its byte-level character."""
    characters = _CHARACTERS
    return "".join(characters[byte] for byte in text.encode("utf-8"))


_CHARACTERS = byte_level_characters()
