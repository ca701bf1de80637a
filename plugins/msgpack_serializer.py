"""The default serializer: msgpack, decoding only registered message types.

A message is a msgpack extension value holding ``[tag, field values...]``;
nested registered dataclasses (sampling params inside a request, say) nest the
same way. Decoding looks the tag up in the registry, so bytes can only ever
become a registered type.
"""

from __future__ import annotations

import dataclasses

import msgpack

from tercet.plugin_api import MessageRegistry, UnknownMessageError, hookimpl

MESSAGE_EXT_CODE = 1


class MsgpackSerializer:
    def __init__(self, message_registry: MessageRegistry):
        self.registry = message_registry

    def encode(self, message) -> bytes:
        if not self.registry.is_registered(message):
            self.registry.tag_of(message)  # raises, naming the type
        return msgpack.packb(message, default=self._pack_dataclass, use_bin_type=True)

    def decode(self, data: bytes):
        message = msgpack.unpackb(data, ext_hook=self._unpack_dataclass, raw=False, strict_map_key=False)
        if not self.registry.is_registered(message):
            raise UnknownMessageError(f"received a {type(message).__name__}, not a registered message")
        return message

    def _pack_dataclass(self, value):
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            tag = self.registry.tag_of(value)
            names = self.registry.field_names_by_type[type(value)]
            payload = [tag, *(getattr(value, name) for name in names)]
            return msgpack.ExtType(MESSAGE_EXT_CODE, msgpack.packb(payload, default=self._pack_dataclass, use_bin_type=True))
        raise TypeError(f"cannot serialize {type(value).__name__}: only registered message types and plain data")

    def _unpack_dataclass(self, code: int, data: bytes):
        if code != MESSAGE_EXT_CODE:
            raise UnknownMessageError(f"unknown msgpack extension code {code}")
        tag, *values = msgpack.unpackb(data, ext_hook=self._unpack_dataclass, raw=False, strict_map_key=False)
        return self.registry.type_of(tag)(*values)


@hookimpl
def register_serializers(register):
    register("msgpack", MsgpackSerializer)
