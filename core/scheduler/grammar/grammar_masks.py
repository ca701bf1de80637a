"""Masking constrained rows of a step's logits to the tokens their grammar allows.

Only rows of requests with an output constraint are touched; the others are
sampled exactly as without one. The grammar backend is a plugin: when it
fails filling a request's mask, or the mask allows nothing (not even EOS),
that request alone ends with an internal error; its row is sampled unmasked
and the token is dropped, since the request has finished by then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from tercet.containment import ContainedFailures
from tercet.ipc.messages import FinishKind, FinishReason
from tercet.scheduler.grammar.draft_grammar import fill_bitmask_after
from tercet.scheduler.grammar.grammar_backend import GrammarError
from tercet.scheduler.req import Req

if TYPE_CHECKING:
    from tercet.scheduler.request_queues import RequestQueues


class GrammarMasks:
    def __init__(self, queues: "RequestQueues", failures: ContainedFailures, plugin_name: str | None):
        self.queues = queues
        self.failures = failures
        # Who registered the grammar backend, for the failure counts.
        self.plugin_name = plugin_name

    def apply(self, sampled: list[Req], logits, assumed: list[list[int]] | None = None):
        """``logits`` (row i is ``sampled[i]``) with every constrained row masked; a row with
        ``assumed[i]`` drafts (speculative decoding) by the grammar's state after them."""
        rows = [row for row, req in enumerate(sampled) if req.grammar is not None]
        if not rows:
            return logits
        from tercet.model.token_bitmask import mask_rows, new_bitmask

        bitmask = new_bitmask(len(rows), logits.shape[1])
        live = [position for position, row in enumerate(rows)
                if self.fill(sampled[row], bitmask, position, assumed[row] if assumed else ())]
        if not live:
            return logits
        return mask_rows(logits, [rows[position] for position in live], bitmask[live])

    def fill(self, req: Req, bitmask, position: int, ahead: Sequence[int] = ()) -> bool:
        """Fill ``bitmask[position]`` from the request's grammar (after the drafts ``ahead``); False
        (the request ended) when it cannot."""
        if req.is_finished:  # a row of its before this one ended it
            return False
        try:
            fill_bitmask_after(req.grammar, ahead, bitmask, position)
        except GrammarError as error:
            # The backend's word that the constraint itself cannot go on (a parser limit, say).
            self.queues.fail(req, constraint_refusal(req, error))
            return False
        except Exception:
            self.failures.record("grammar", f"the grammar backend failed on request {req.rid!r}", plugin=self.plugin_name)
            self.queues.fail(req, FinishReason.internal_failure("its output constraint"))
            return False
        if not bitmask[position].any():
            self.failures.record("grammar", f"the output constraint of request {req.rid!r} allows no token",
                                 plugin=self.plugin_name, with_traceback=False)
            self.queues.fail(req, FinishReason.internal_failure("its output constraint"))
            return False
        return True


def constraint_refusal(req: Req, error: GrammarError) -> FinishReason:
    """The client's 400 for a constraint that cannot go on, naming the parameter it came in."""
    kind = req.sampling_params.constraint[0]
    return FinishReason(FinishKind.ABORT, message=f"{kind}: {error}", status_code=400, param=kind)
