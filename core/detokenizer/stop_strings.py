"""Stop-string trimming and hold-back for one request's streamed text.

The scheduler decides when a request ends; this filter only decides which
text the client may see. A stop string that arrives split across deltas must
never be shown in part, so the filter holds back any tail that could still
grow into a match, and releases it when it turns out not to (or when the
request ends).

The match is the occurrence that starts earliest in the text; of stop strings
starting at the same place, the shortest (it completes first). That is the
rule the scheduler's ``matched_stop_string`` uses, so the trimmed text and the
reported ``matched_text`` agree.
"""

from __future__ import annotations


class StopStringFilter:
    def __init__(self, stop: list[str], no_stop_trim: bool = False):
        # An empty stop string would match before any text at all; the
        # sampling parameters reject it, so here it is simply never a match.
        self.stop_strings = [s for s in dict.fromkeys(stop) if s]
        self.no_stop_trim = no_stop_trim
        # Text received but not yet returned: from the earliest place a stop
        # string might still begin to the end of what arrived.
        self.pending = ""
        self.is_stopped = False

    def feed(self, delta: str) -> str:
        """The part of the text so far that is safe to show now, not shown before."""
        if self.is_stopped:
            return ""
        text = self.pending + delta
        match = self._earliest_match(text)
        hold_from = self._earliest_partial_start(text, before=match[0] if match else len(text))
        if match is not None and hold_from is None:
            return self._stop_at(text, match)
        safe_end = hold_from if hold_from is not None else len(text)
        self.pending = text[safe_end:]
        return text[:safe_end]

    def flush(self) -> str:
        """At the request's end: held-back text, cut at a match it contains."""
        if self.is_stopped:
            return ""
        text, self.pending = self.pending, ""
        self.is_stopped = True
        match = self._earliest_match(text)
        return text if match is None else self._stop_at(text, match)

    def _stop_at(self, text: str, match: tuple[int, int]) -> str:
        start, length = match
        self.is_stopped = True
        self.pending = ""
        return text[: start + length] if self.no_stop_trim else text[:start]

    def _earliest_match(self, text: str) -> tuple[int, int] | None:
        """(start, length) of the match in ``text``, or None."""
        found = [(text.find(stop), len(stop)) for stop in self.stop_strings if stop in text]
        return min(found) if found else None

    def _earliest_partial_start(self, text: str, before: int) -> int | None:
        """The first index before ``before`` where the rest of ``text`` is a
        proper prefix of a stop string, i.e. a match may still start there."""
        earliest = None
        for stop in self.stop_strings:
            # Longest proper prefix of ``stop`` that ``text`` ends with.
            for length in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:length]):
                    start = len(text) - length
                    if start < before and (earliest is None or start < earliest):
                        earliest = start
                    break
        return earliest
