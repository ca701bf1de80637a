"""Checks of one request field, whatever the field: a range, a text, a type.

Every parser at the HTTP edge refuses a bad field through these, and
:mod:`tercet.sampling_params` builds its range table (``FIELD_RANGES``) from
:class:`IntRange` and :class:`NumberRange`, so a refusal reads the same
wherever the field stands. Each raises :class:`RequestError` naming the field.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass

from tercet.errors import RequestError


@dataclass(frozen=True)
class IntRange:
    """The integers from ``minimum`` to ``maximum``, both included.

    A field bounded by the vocabulary has ``vocab_offset``: when the vocabulary
    size is known the maximum is ``vocab_size + vocab_offset`` instead (top_k:
    the vocabulary size; a token id: one less).
    """

    minimum: int
    maximum: int
    vocab_offset: int | None = None

    def maximum_for(self, vocab_size: int | None) -> int:
        if self.vocab_offset is None or vocab_size is None:
            return self.maximum
        return min(self.maximum, vocab_size + self.vocab_offset)

    def check(self, value, name: str, vocab_size: int | None = None, subject: str | None = None) -> None:
        """Refuse ``value`` unless in range; the error names param ``name`` and
        says ``subject`` (default: ``name``) "must be…"."""
        maximum = self.maximum_for(vocab_size)
        if not is_integer(value) or not self.minimum <= value <= maximum:
            raise RequestError(
                f"{subject or name} must be an integer from {self.minimum} to {maximum}, got {shown(value)}", name
            )


@dataclass(frozen=True)
class NumberRange:
    """The numbers from ``minimum`` (excluded when ``exclusive_minimum``) to ``maximum``."""

    minimum: float
    maximum: float
    exclusive_minimum: bool = False

    def check(self, value, name: str, vocab_size: int | None = None, subject: str | None = None) -> None:
        """As :meth:`IntRange.check` (no number range depends on the vocabulary)."""
        subject = subject or name
        # value != value: NaN, which passes every comparison.
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            raise RequestError(f"{subject} must be a number, got {shown(value)}", name)
        too_small = value <= self.minimum if self.exclusive_minimum else value < self.minimum
        if too_small or value > self.maximum:
            bracket = "(" if self.exclusive_minimum else "["
            interval = f"{bracket}{self.minimum:g}, {self.maximum:g}]"
            raise RequestError(f"{subject} must be in {interval}, got {shown(value)}", name)


def is_integer(value) -> bool:
    """An int and not a bool (JSON's ``true`` is no number)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_text(value: str, name: str) -> None:
    """Refuse a string UTF-8 cannot encode.

    JSON's ``"\\ud800"`` decodes to a lone surrogate, which neither msgpack nor
    a tokenizer can take: past the parsers it would fail far from its cause.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise RequestError(
            f"{name} is not valid Unicode: it holds a lone surrogate {shown(value[error.start])} "
            f"at position {error.start}",
            name,
        ) from None


def check_texts(values: list[str], name: str) -> None:
    """:func:`check_text` for each string of a list, named by its position (``prompt[2]``)."""
    for index, value in enumerate(values):
        check_text(value, f"{name}[{index}]")


def check_non_empty_text(value, name: str) -> None:
    """Refuse anything but a non-empty string UTF-8 can encode."""
    if not isinstance(value, str) or not value:
        raise RequestError(f"{name} must be a non-empty string", name)
    check_text(value, name)


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 80


def shown(value) -> str:
    """``repr(value)`` cut short, for error messages.

    A request's value can be a 16 MB string or a list nested hundreds deep
    (where the builtin ``repr`` hits the recursion limit); this stays short and
    cannot fail. Like ``repr``, it escapes lone surrogates.
    """
    return _SHOWN.repr(value)
