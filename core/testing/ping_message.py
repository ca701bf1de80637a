"""A message type no part of tercet knows, as a third party's plugin would register one.

Tests of message registration, of dispatch by type and of a manager's handlers send it
(the plugin under test registers it, say as ``"test.ping"``): one type, so that every such
test sends the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ping:
    text: str
