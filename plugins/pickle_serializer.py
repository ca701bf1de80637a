"""Opt-in pickle serializer: any picklable message, checked against the registry.

Unpickling runs code chosen by whoever wrote the bytes, so only choose this
when every process on the transport is trusted; the server warns at start-up.
"""

from __future__ import annotations

import pickle

from tercet.plugin_api import MessageRegistry, UnknownMessageError, hookimpl


class PickleSerializer:
    is_trusted_only = True

    def __init__(self, message_registry: MessageRegistry):
        self.registry = message_registry

    def encode(self, message) -> bytes:
        self.registry.tag_of(message)
        return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)

    def decode(self, data: bytes):
        message = pickle.loads(data)
        if not self.registry.is_registered(message):
            raise UnknownMessageError(f"received a {type(message).__name__}, not a registered message")
        return message


@hookimpl
def register_serializers(register):
    register("pickle", PickleSerializer)
