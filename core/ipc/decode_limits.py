"""How big and how deep a message a serializer may decode, and the checks it runs.

Bytes on an edge come from whoever can write to its socket, so a decoder must
not trust their shape: a few kilobytes of msgpack nesting messages inside
messages make a recursive decoder overflow the C stack and kill the process.
Every serializer therefore keeps three limits (part of the serializer contract,
see ``register_serializers``):

- ``max_bytes``: a longer frame is refused before any of it is read;
- ``max_nested_messages``: a message inside a message inside … is refused at
  this depth, before the decoder recurses into the next one;
- ``max_depth``: containers (lists, tuples, maps, sets) and messages nested
  along one path, checked on the decoded value by :meth:`DecodeLimits.check_depth`
  without recursion, so shared or cyclic values (pickle can build both) end too.

Legitimate messages stay far below the defaults: the deepest core message is
six levels (a batch, its list of logprobs, a ``TokenLogprobs``, its three nested top
lists); the size is ``ipc.max_message_bytes``.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from tercet.errors import TercetError

DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024

# Values that hold nothing else: they end a path.
_SCALAR_TYPES = frozenset({int, float, str, bytes, bool, type(None)})


class MessageOverLimitsError(TercetError):
    """A frame longer, or a message deeper, than the serializer may decode."""


@dataclass(frozen=True)
class DecodeLimits:
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_depth: int = 64
    max_nested_messages: int = 16

    def check_size(self, data: bytes) -> None:
        """Refuse a frame over ``max_bytes``: call before reading any of it (and after encoding)."""
        if len(data) > self.max_bytes:
            raise MessageOverLimitsError(f"a frame of {len(data)} bytes is over the limit of {self.max_bytes} bytes")

    def check_nested_messages(self, depth: int) -> None:
        """Refuse the ``depth``-th message inside a message (1 is the outermost): call before decoding it."""
        if depth > self.max_nested_messages:
            raise MessageOverLimitsError(f"messages nested more than {self.max_nested_messages} deep")

    def check_depth(self, value) -> None:
        """Refuse a decoded value whose containers and messages nest deeper than ``max_depth``.

        Iterative, so a deep value cannot exhaust the stack here either; a value
        reached again by a deeper path (pickle shares and cycles) is walked again
        from there, at most ``max_depth`` times, so a cycle ends at the limit.
        """
        deepest_seen: dict[int, int] = {}
        pending = [(value, 1)]
        while pending:
            value, depth = pending.pop()
            children = _children(value)
            if children is None:
                continue
            if depth > self.max_depth:
                raise MessageOverLimitsError(f"containers or messages nested more than {self.max_depth} deep")
            if deepest_seen.get(id(value), 0) >= depth:
                continue
            deepest_seen[id(value)] = depth
            pending.extend((child, depth + 1) for child in children if type(child) not in _SCALAR_TYPES)


def _children(value):
    """What ``value`` holds, or None for a value that holds nothing (a scalar, an enum)."""
    kind = type(value)
    if kind in _SCALAR_TYPES:
        return None
    if kind in (list, tuple, set, frozenset):
        # Fast path: a flat list of token ids (thousands of ints) is checked in C.
        return () if set(map(type, value)) <= _SCALAR_TYPES else value
    if kind is dict:
        return itertools.chain(value.keys(), value.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [getattr(value, field.name) for field in dataclasses.fields(value)]
    if isinstance(value, (list, tuple, set, frozenset, dict)):  # a subclass: walked like its base
        return list(itertools.chain(value.keys(), value.values())) if isinstance(value, dict) else value
    return None
