"""Contained failures: what went wrong in one request, message or plugin call, and was kept there.

A failure stays with what caused it: an exception while handling one request
fails that request, a malformed message is dropped, a plugin that raises is
worked around for that call; the batch and the process go on. Each process
keeps a :class:`ContainedFailures` that logs every such failure and counts
them by kind and by plugin, for the log and ``GET /get_server_info``.

Kinds, by where they happen:

- ``undecodable_message``, ``message_over_limits``, ``malformed_message``,
  ``unhandled_message``: a message dropped on receipt (the log names the edge
  it came in on);
- ``message_handler``: a handler raised on one message;
- ``generate_request``: a request could not be set up in the scheduler;
- ``scheduling_policy``: ``order()`` or ``choose_preemption_victim()`` raised
  or answered nonsense (that step falls back to arrival order / no preemption);
- ``sampling``, ``stop_check``, ``output``: one request's part of a step;
- ``detokenizer``: the detokenizer strategy raised on one request;
- ``control_handler``: a control request's handler raised (its reply carries the error);
- ``http_handler``: an HTTP endpoint raised.

The log shows a failure's traceback the first time its (kind, plugin) is
seen, then one line at every power of two, so a plugin failing every step
cannot flood the log.
"""

from __future__ import annotations

import logging
from collections import Counter

# What a client sees when its request was ended by a contained failure.
INTERNAL_FAILURE_STATUS = 500


class ContainedFailures:
    def __init__(self, component: str, logger: logging.Logger | None = None):
        self.component = component
        self.logger = logger or logging.getLogger(f"tercet.{component}")
        self.counts: Counter[tuple[str, str | None]] = Counter()

    def count(self, kind: str, plugin: str | None = None) -> int:
        """Count one failure without logging it (the caller logs); the count so far."""
        self.counts[(kind, plugin)] += 1
        return self.counts[(kind, plugin)]

    def record(self, kind: str, description: str, plugin: str | None = None, with_traceback: bool = True) -> None:
        """Count one failure and log it; call from inside ``except`` to log its traceback."""
        count = self.count(kind, plugin)
        if count & (count - 1):  # not a power of two: counted, not logged again
            return
        by = f" (plugin {plugin!r})" if plugin else ""
        again = f"; {count} times so far" if count > 1 else ""
        self.logger.error(
            "contained failure [%s]%s: %s%s; the %s goes on", kind, by, description, again, self.component,
            exc_info=with_traceback and count == 1,
        )

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict:
        """``{"total": n, "by_kind": {kind: n}, "by_plugin": {plugin: n}}`` for /get_server_info."""
        by_kind: Counter[str] = Counter()
        by_plugin: Counter[str] = Counter()
        for (kind, plugin), count in self.counts.items():
            by_kind[kind] += count
            if plugin is not None:
                by_plugin[plugin] += count
        return {"total": self.total, "by_kind": dict(by_kind), "by_plugin": dict(by_plugin)}


def internal_failure_message(what: str) -> str:
    return f"internal error while {what}; this request was ended and the server goes on (the server log has the details)"
