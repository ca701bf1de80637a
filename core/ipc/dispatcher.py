"""Type-based dispatch of incoming messages: one handler per message type."""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

from tercet.containment import ContainedFailures
from tercet.errors import TercetError

logger = logging.getLogger(__name__)


class TypeBasedDispatcher:
    def __init__(self, handlers: Iterable[tuple[type, Callable[[Any], Any]]]):
        self.handlers: dict[type, Callable[[Any], Any]] = {}
        for message_type, handler in handlers:
            self.handlers[message_type] = handler

    def __call__(self, message: Any) -> Any:
        handler = self.handler_for(message)
        if handler is None:
            raise TercetError(f"no handler for message type {type(message).__name__}")
        return handler(message)

    def handler_for(self, message: Any) -> Callable[[Any], Any] | None:
        # Exact type first (the hot path), then subclasses, so a plugin's
        # refined message type still reaches a handler of its base.
        handler = self.handlers.get(type(message))
        if handler is None:
            for message_type, candidate in self.handlers.items():
                if isinstance(message, message_type):
                    return candidate
        return handler

    def dispatch_contained(self, message: Any, edge: str, failures: ContainedFailures) -> None:
        """Dispatch one received message; one that no handler takes, or whose
        handler raises, is dropped and counted, and the caller's loop goes on."""
        handler = self.handler_for(message)
        if handler is None:
            # Logged every time, as undecodable messages are: a forged message is worth seeing.
            failures.count("unhandled_message")
            logger.error("dropped a %s from %s: no handler takes it here", type(message).__name__, edge)
            return
        try:
            handler(message)
        except Exception:
            failures.record("message_handler", f"handling a {type(message).__name__} from {edge} failed")
