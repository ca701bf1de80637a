"""Drafts under an output constraint: cut to what the grammar allows, and masked row by row.

A constrained request speculates when its matcher can take tokens back
(``GrammarMatcher.can_roll_back``). Before the forward, its drafts are walked
through the matcher: each must be allowed by the mask of the state the drafts
before it reach, and the first that is not ends them (the target, masked the
same way, could never choose it). After the forward, the row that predicts the
token after drafts ``d1..di`` is masked with the state after them. Both walks
take every draft back at once: the matcher only keeps tokens when they are
emitted, as without speculation (:mod:`tercet.scheduler.sampled_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence


def can_check_drafts(matcher) -> bool:
    return matcher is None or getattr(matcher, "can_roll_back", False)


def allowed_drafts(matcher, draft: Sequence[int], vocab_size: int) -> list[int]:
    """The longest prefix of ``draft`` the grammar allows from the matcher's state, which it leaves as it was."""
    from tercet.model.token_bitmask import new_bitmask

    bitmask = new_bitmask(1, vocab_size)
    taken = 0
    try:
        for token in draft:
            matcher.fill_bitmask(bitmask, 0)
            if not is_allowed(bitmask, token) or not matcher.accept(token):
                break
            taken += 1
    finally:
        if taken:
            matcher.rollback(taken)
    return list(draft[:taken])


def fill_bitmask_after(matcher, ahead: Sequence[int], bitmask, row: int) -> None:
    """``bitmask[row]``: the tokens allowed once the drafts ``ahead`` are output; the matcher is left as it was."""
    taken = 0
    try:
        for token in ahead:
            if not matcher.accept(token):
                raise RuntimeError(f"the grammar refused draft {token}, which it allowed before the forward")
            taken += 1
        matcher.fill_bitmask(bitmask, row)
    finally:
        if taken:
            matcher.rollback(taken)


def is_allowed(bitmask, token: int) -> bool:
    # Python's integers sign-extend, so bit 31 of a negative int32 word reads as set.
    return bool(int(bitmask[0, token // 32]) & (1 << (token % 32)))
