"""Verifying drafts: which of a request's guessed tokens the target model agrees with.

A request fed its last token and drafts ``d1..dm`` has ``m + 1`` rows of
logits: row ``i`` predicts the token after the output plus ``d1..di``. Each
row is sampled as that step would be without speculation (the same logit
edits, penalties over the output plus the drafts before it, and the seeded
draw of that step), then the rows are walked in order: while the target's
token equals the draft, the draft is accepted and the next row is read; the
first token that differs, or the one after the last draft, is the target's
own and ends the walk. Every emitted token (with its log-probability) is the
target's.

For greedy rows this is the longest prefix equal to the argmax, plus the
argmax after it. For sampled rows it is the standard rejection-sampling rule
for a proposer that drafts one token with certainty (draft distribution
``q`` a point mass on ``d``): accept ``d`` with probability
``min(1, p(d) / q(d)) = p(d)``, else draw from ``p`` with ``d`` removed and
renormalised. Drawing ``t ~ p`` and accepting when ``t == d`` realises
exactly that (``P(accept) = p(d)``, and a rejected draw is ``p`` given
``t != d``), so the output distribution is the target's, and with the
request's seed it is the very token decoding without speculation draws.

The KV of the accepted drafts is kept (they were fed at their positions);
that of rejected ones is garbage past ``num_cached_tokens``, overwritten by
later feeds, and whole pages holding only rejected slots are freed at once.
The prefix cache only ever takes pages below ``num_cached_tokens``, so it
never holds a rejected token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tercet.scheduler.req import Req
from tercet.scheduler.row_sampling import TokenChoice

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DraftRows:
    """The sampling rows of the requests that verify drafts this step, in order."""

    reqs: list[Req]  # each request once per row (m + 1 rows for m drafts)
    assumed: list[list[int]]  # per row, the drafts taken as already output before it
    drafts: list[list[int]]  # per request, its drafts
    logits: list["torch.Tensor"]  # per request, its ``[m + 1, V]`` logits

    @classmethod
    def of(cls, fed: list[Req], drafted: dict[int, list[int]], chunk_logits: dict[int, "torch.Tensor"]) -> "DraftRows":
        reqs, assumed, drafts, logits = [], [], [], []
        for index, draft in drafted.items():
            reqs += [fed[index]] * (len(draft) + 1)
            assumed += [draft[:position] for position in range(len(draft) + 1)]
            drafts.append(draft)
            logits.append(chunk_logits[index])
        return cls(reqs, assumed, drafts, logits)

    def accepted(self, choices: list[TokenChoice | None]) -> list[tuple[Req, list[TokenChoice], int, int]]:
        """Per request whose rows all sampled: its emitted tokens, its number of drafts, and how many were accepted."""
        results, row = [], 0
        for draft in self.drafts:
            req, own = self.reqs[row], choices[row:row + len(draft) + 1]
            row += len(draft) + 1
            if any(choice is None for choice in own):
                continue  # its sampling failed: the request was ended
            emitted = accepted_prefix(draft, own)
            results.append((req, emitted, len(draft), len(emitted) - 1))
        return results


def accepted_prefix(drafts: list[int], choices: list[TokenChoice]) -> list[TokenChoice]:
    """The target's tokens while they equal the drafts, then the first one that does not (or the bonus one)."""
    emitted = []
    for position, choice in enumerate(choices):
        emitted.append(choice)
        if position == len(drafts) or choice.token_id != drafts[position]:
            break
    return emitted

