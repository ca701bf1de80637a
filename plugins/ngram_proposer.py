"""The ``ngram`` proposer (prompt lookup): drafts copied from the request's own tokens.

When the newest tokens already appeared earlier in the prompt or the output,
the tokens that followed them there are a good guess for what comes next:
an answer that quotes its prompt (extraction, edits, code, RAG) repeats long
runs of it. The guess is the continuation of the longest suffix, between
``[speculative] ngram_min`` and ``ngram_max`` tokens, found earlier in the
request; of several places, the latest. No weights, no state.
"""

from __future__ import annotations

from array import array
from typing import Sequence

from tercet.plugin_api import ConfigError, DraftRequest, Proposer, hookimpl

# Token ids as 32-bit integers: a suffix is then looked up by bytes.rfind, in C.
_ITEM = array("i").itemsize


def continuation_of_longest_suffix(token_ids: Sequence[int], min_n: int, max_n: int, max_drafts: int) -> list[int]:
    """What followed the latest earlier occurrence of the longest suffix of ``token_ids``
    (``min_n`` to ``max_n`` tokens long), at most ``max_drafts`` tokens; empty when none occurs."""
    data = array("i", token_ids).tobytes()
    count = len(token_ids)
    # The occurrence must end before the last token, so that something follows it.
    searched_end = (count - 1) * _ITEM
    for n in range(min(max_n, count - 1), min_n - 1, -1):
        start = _latest_aligned(data, data[-n * _ITEM:], searched_end)
        if start is not None:
            return list(token_ids[start + n : start + n + max_drafts])
    return []


def _latest_aligned(data: bytes, needle: bytes, end: int) -> int | None:
    """The token index of the latest occurrence of ``needle`` in ``data[:end]`` that starts on a token."""
    while True:
        found = data.rfind(needle, 0, end)
        if found < 0:
            return None
        if found % _ITEM == 0:
            return found // _ITEM
        # A match across token boundaries: look further left.
        end = found + len(needle) - 1


class NgramProposer(Proposer):
    def __init__(self, config):
        speculative = config.speculative
        if speculative.ngram_min > speculative.ngram_max:
            raise ConfigError(
                f"speculative.ngram_min ({speculative.ngram_min}) must not exceed "
                f"speculative.ngram_max ({speculative.ngram_max})"
            )
        self.min_n, self.max_n = speculative.ngram_min, speculative.ngram_max

    def propose(self, requests: Sequence[DraftRequest]) -> list[list[int]]:
        return [
            continuation_of_longest_suffix(req.token_ids, self.min_n, self.max_n, req.max_drafts) for req in requests
        ]


@hookimpl
def register_speculative_proposers(register):
    register("ngram", NgramProposer)
