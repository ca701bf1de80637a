"""What a sampled token does to its request: it is appended, advances the
request's grammar, and may finish the request.

Advancing a grammar (a plugin's matcher) and checking stop conditions (which
decodes with the tokenizer) can fail for one request alone: that request ends
with an internal error and the rest of the step goes on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tercet.containment import ContainedFailures
from tercet.ipc.messages import FinishKind, FinishReason
from tercet.scheduler.grammar.grammar_backend import GrammarError
from tercet.scheduler.grammar.grammar_masks import constraint_refusal
from tercet.scheduler.req import Req
from tercet.scheduler.row_sampling import TokenChoice
from tercet.scheduler.stop_conditions import StopConditions

if TYPE_CHECKING:
    from tercet.scheduler.request_queues import RequestQueues


class RequestStepFailed(Exception):
    """One request's part of the step failed (already recorded); ``what`` it was doing, for its client."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


class RequestRefused(Exception):
    """One request cannot go on because of what it asked for; ``reason`` is its 4xx."""

    def __init__(self, reason: FinishReason):
        super().__init__(reason.message)
        self.reason = reason


class SampledTokens:
    def __init__(self, queues: "RequestQueues", stop_conditions: StopConditions, failures: ContainedFailures,
                 grammar_plugin: str | None):
        self.queues = queues
        self.stop_conditions = stop_conditions
        self.failures = failures
        self.grammar_plugin = grammar_plugin

    def take(self, req: Req, choice: TokenChoice) -> None:
        """Append the sampled token and finish the request if it is done."""
        if req.needs_prefill_only:  # it ran its prompt for the log-probabilities; no token is wanted
            self.queues.finish(req, FinishReason(FinishKind.LENGTH))
            return
        append_token(req, choice)
        try:
            reason = self.advance_grammar(req, choice.token_id) if req.grammar is not None else None
            if reason is None:
                reason = self.check_stop(req)
        except RequestStepFailed as failure:
            self.queues.fail(req, FinishReason.internal_failure(failure.what))
            return
        except RequestRefused as refusal:
            self.queues.fail(req, refusal.reason)
            return
        if reason is not None:
            self.queues.finish(req, reason)

    def advance_grammar(self, req: Req, token_id: int) -> FinishReason | None:
        """Feed the token to the request's grammar; ``stop`` once the output is a whole match
        (nothing but EOS could follow)."""
        try:
            accepted = req.grammar.accept(token_id)
            complete = accepted and req.grammar.is_complete()
        except GrammarError as error:
            # The backend's word that the constraint itself cannot go on: the client's 400.
            raise RequestRefused(constraint_refusal(req, error)) from None
        except Exception:
            accepted = complete = False
        if not accepted:
            self.failures.record("grammar", f"the grammar of request {req.rid!r} did not take its sampled token",
                                 plugin=self.grammar_plugin)
            raise RequestStepFailed("advancing its output constraint")
        return FinishReason(FinishKind.STOP) if complete else None

    def check_stop(self, req: Req) -> FinishReason | None:
        try:
            return self.stop_conditions.check(req)
        except Exception:
            self.failures.record("stop_check", f"checking the stop conditions of request {req.rid!r} failed")
            raise RequestStepFailed("checking its stop conditions") from None


def append_token(req: Req, choice: TokenChoice) -> None:
    req.output_ids.append(choice.token_id)
    if req.sampling_params.return_logprob:
        req.unsent_logprobs.append(choice.logprob)
        req.unsent_top_logprobs.append(choice.top_logprobs)
