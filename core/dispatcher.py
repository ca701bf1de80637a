"""Type-based dispatch of incoming messages: one handler per message type."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from tercet.errors import TercetError


class TypeBasedDispatcher:
    def __init__(self, handlers: Iterable[tuple[type, Callable[[Any], Any]]]):
        self.handlers: dict[type, Callable[[Any], Any]] = {}
        for message_type, handler in handlers:
            self.handlers[message_type] = handler

    def __call__(self, message: Any) -> Any:
        # Exact type first (the hot path), then subclasses, so a plugin's
        # refined message type still reaches a handler of its base.
        handler = self.handlers.get(type(message))
        if handler is None:
            for message_type, candidate in self.handlers.items():
                if isinstance(message, message_type):
                    handler = candidate
                    break
            else:
                raise TercetError(f"no handler for message type {type(message).__name__}")
        return handler(message)

    def handles(self, message_type: type) -> bool:
        return message_type in self.handlers
