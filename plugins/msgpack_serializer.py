"""The default serializer: msgpack, decoding only registered message types.

A message is a msgpack extension value holding ``[tag, field values...]``;
nested registered dataclasses (sampling params inside a request, say) nest the
same way. Decoding looks the tag up in the registry, so bytes can only ever
become a registered type.

Each nested message is one more recursive ``unpackb``, each a large C frame,
so decoding keeps the registry's limits (``message_registry.limits``): the
frame's size before reading it, the message nesting before recursing, and the
depth of what was decoded (msgpack's own C decoder stops at 1,024 nested
containers without recursing).
"""

from __future__ import annotations

import dataclasses

import msgpack

from tercet.plugin_api import MessageRegistry, UnknownMessageError, hookimpl

MESSAGE_EXT_CODE = 1


class MsgpackSerializer:
    def __init__(self, message_registry: MessageRegistry):
        self.registry = message_registry
        self.limits = message_registry.limits

    def encode(self, message) -> bytes:
        if not self.registry.is_registered(message):
            self.registry.tag_of(message)  # raises, naming the type
        data = msgpack.packb(message, default=self._pack_dataclass, use_bin_type=True)
        self.limits.check_size(data)  # its receiver would drop it: refuse it here, where the sender sees why
        return data

    def decode(self, data: bytes):
        self.limits.check_size(data)
        message = _BoundedUnpack(self.registry).unpack(data)
        if not self.registry.is_registered(message):
            raise UnknownMessageError(f"received a {type(message).__name__}, not a registered message")
        self.limits.check_depth(message)
        return message

    def _pack_dataclass(self, value):
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            tag = self.registry.tag_of(value)
            names = self.registry.field_names_by_type[type(value)]
            payload = [tag, *(getattr(value, name) for name in names)]
            return msgpack.ExtType(MESSAGE_EXT_CODE, msgpack.packb(payload, default=self._pack_dataclass, use_bin_type=True))
        raise TypeError(f"cannot serialize {type(value).__name__}: only registered message types and plain data")


class _BoundedUnpack:
    """One decode: counts how deep the nested messages go, and refuses the next level past the limit."""

    def __init__(self, registry: MessageRegistry):
        self.registry = registry
        self.nested_messages = 0

    def unpack(self, data: bytes):
        return msgpack.unpackb(data, ext_hook=self._unpack_message, raw=False, strict_map_key=False)

    def _unpack_message(self, code: int, data: bytes):
        if code != MESSAGE_EXT_CODE:
            raise UnknownMessageError(f"unknown msgpack extension code {code}")
        self.nested_messages += 1
        self.registry.limits.check_nested_messages(self.nested_messages)
        try:
            tag, *values = self.unpack(data)
        finally:
            self.nested_messages -= 1
        return self.registry.type_of(tag)(*values)


@hookimpl
def register_serializers(register):
    register("msgpack", MsgpackSerializer)
