"""Opt-in pickle serializer: any picklable message, checked against the registry.

Unpickling runs code chosen by whoever wrote the bytes, so only choose this
when every process on the transport is trusted; the server warns at start-up.
It still keeps the registry's decode limits: unpickling itself does not
recurse, so the size is checked before and the depth (shared and cyclic values
included) after.
"""

from __future__ import annotations

import pickle

from tercet.plugin_api import MessageRegistry, UnknownMessageError, hookimpl


class PickleSerializer:
    is_trusted_only = True

    def __init__(self, message_registry: MessageRegistry):
        self.registry = message_registry
        self.limits = message_registry.limits

    def encode(self, message) -> bytes:
        self.registry.tag_of(message)
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self.limits.check_size(data)
        return data

    def decode(self, data: bytes):
        self.limits.check_size(data)
        message = pickle.loads(data)
        if not self.registry.is_registered(message):
            raise UnknownMessageError(f"received a {type(message).__name__}, not a registered message")
        self.limits.check_depth(message)
        return message


@hookimpl
def register_serializers(register):
    register("pickle", PickleSerializer)
