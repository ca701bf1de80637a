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
six levels (a batch, its list of logprobs, a ``TokenLogprobs``, its three
nested top lists); the size is ``ipc.max_message_bytes``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tercet.errors import TercetError

DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024


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

        Level by level, without recursion, so a deep value cannot exhaust the
        stack here either. A value reached by several paths (pickle shares) is
        walked once per level it appears on, so a cycle ends at the limit.
        """
        level = [value]
        for _ in range(self.max_depth):
            level = [child for holder in level for child in _children_that_hold(holder)]
            if not level:
                return
            if len(level) > 1:
                level = list({id(holder): holder for holder in level}.values())
        if any(not _holds_nothing(type(holder)) for holder in level):
            raise MessageOverLimitsError(f"containers or messages nested more than {self.max_depth} deep")


DEFAULT_DECODE_LIMITS = DecodeLimits()


def _children_that_hold(value) -> list:
    """What ``value`` holds that may hold more: containers, messages, types not seen yet."""
    kind = type(value)
    if kind in _BUILT_IN_CONTAINERS:
        # A flat list of token ids (thousands of ints) is checked in C.
        if set(map(type, value)) <= _LEAF_TYPES:
            return []
    elif kind is dict:
        value = [*value.keys(), *value.values()]
    else:
        value = _items_getter(kind)(value)
    return [item for item in value if type(item) not in _LEAF_TYPES]


def _holds_nothing(kind: type) -> bool:
    _items_getter(kind)
    return kind in _LEAF_TYPES


def _items_getter(kind: type):
    """How to list what a value of ``kind`` holds: a message's fields, a container subclass's
    items; nothing for anything else (an enum, say), whose type then joins the leaf types."""
    getter = _ITEMS_BY_TYPE.get(kind)
    if getter is None:
        getter = _ITEMS_BY_TYPE[kind] = _new_items_getter(kind)
    return getter


def _new_items_getter(kind: type):
    if dataclasses.is_dataclass(kind):
        names = [field.name for field in dataclasses.fields(kind)]
        return lambda value: [getattr(value, name) for name in names]
    if issubclass(kind, dict):
        return lambda value: [*value.keys(), *value.values()]
    if issubclass(kind, (list, tuple, set, frozenset)):
        return list
    _LEAF_TYPES.add(kind)
    return lambda value: ()


_BUILT_IN_CONTAINERS = frozenset({list, tuple, set, frozenset})
# Types whose values hold nothing: the scalars, and every other such type once seen.
_LEAF_TYPES: set[type] = {int, float, str, bytes, bool, type(None)}
_ITEMS_BY_TYPE: dict[type, object] = {}
