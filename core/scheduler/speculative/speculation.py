"""Speculative decoding's side of a step: which requests get drafts, and from whom.

Each step, after the feeds are planned, the decoding requests that may
speculate are shown to the configured proposer (a plugin,
:mod:`tercet.scheduler.speculative.proposer`); each draft it gives is appended to its
request's feed, so the one forward of the step also runs the drafts, as an
extend over the paged KV cache (:mod:`tercet.scheduler.speculative.draft_verification`
keeps what the target model agrees with). A request speculates when:

- it asked to (``speculative``, true unless the request says false);
- it has no output constraint, or its grammar's matcher can take tokens back:
  its drafts are then cut to what the grammar allows and its rows masked by
  the state each draft reaches (:mod:`tercet.scheduler.grammar.draft_grammar`);
- its ``max_tokens`` leaves room for a draft beside the target's own token;
- the step decodes at most ``[speculative] max_batch`` requests: past that the
  forward is compute-bound, and verifying drafts costs more than it saves;
- free KV pages can hold the drafts (they never evict the prefix cache nor
  retract anyone; a draft that does not fit is cut).

The proposer is a plugin: one that raises or answers something malformed
gives no drafts for that step, counted against its plugin, and the step runs
as without speculation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tercet.config_sections import SpeculativeConfig
from tercet.containment import ContainedFailures
from tercet.scheduler.grammar.draft_grammar import allowed_drafts, can_check_drafts
from tercet.scheduler.req import Req
from tercet.scheduler.speculative.model_drafter import load_model_drafter
from tercet.scheduler.speculative.proposer import DraftModel, DraftRequest, Proposer

if TYPE_CHECKING:
    from tercet.processes.context import ProcessContext
    from tercet.scheduler.kv_memory import RequestKVMemory


def speculation_of(context: "ProcessContext", model_runner, failures: ContainedFailures) -> "Speculation | None":
    """Speculation with the proposer ``[speculative] proposer`` names; None when it is "none"."""
    factory = context.chosen("speculative_proposers")
    if factory is None:
        return None
    config = context.config.speculative
    proposer = factory(context.config)
    if isinstance(proposer, DraftModel):
        proposer = load_model_drafter(proposer, context, model_runner)
    return Speculation(proposer, config.proposer, context.chosen_plugin_name("speculative_proposers"),
                       config, model_runner.vocab_size, failures)


@dataclass(frozen=True)
class SpeculationStats:
    """What speculation did on a rank, per proposer (one is configured at a time)."""

    proposer: str
    # Request-steps that verified drafts, the draft tokens verified, and those accepted.
    num_verifications: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Draft tokens accepted per verification (the target's own token not counted)."""
        return self.num_accepted_tokens / self.num_verifications if self.num_verifications else 0.0

    def as_dict(self) -> dict:
        return {
            "proposer": self.proposer, "verifications": self.num_verifications,
            "draft_tokens": self.num_draft_tokens, "accepted_tokens": self.num_accepted_tokens,
            "acceptance_rate": self.acceptance_rate, "mean_accepted_length": self.mean_accepted_length,
        }


class Speculation:
    def __init__(self, proposer: Proposer, name: str, plugin_name: str | None, config: SpeculativeConfig,
                 vocab_size: int, failures: ContainedFailures):
        self.proposer = proposer
        self.plugin_name = plugin_name
        self.k = config.k
        self.max_batch = config.max_batch
        self.vocab_size = vocab_size
        self.failures = failures
        self.stats = SpeculationStats(name)
        # Requests the proposer was shown and not yet told they left.
        self.shown: set[str] = set()

    def may_speculate(self, req: Req) -> bool:
        return (req.sampling_params.speculative and can_check_drafts(req.grammar) and not req.is_prefilling
                and self.max_drafts(req) > 0)

    def max_drafts(self, req: Req) -> int:
        # The step emits the accepted drafts plus the target's token: all within max_tokens.
        return min(self.k, req.sampling_params.max_new_tokens - len(req.output_ids) - 1)

    def add_drafts(self, fed: list[Req], feeds: list[list[int]], memory: "RequestKVMemory",
                   running: tuple[Req, ...]) -> dict[int, list[int]]:
        """Append drafts to the feeds of requests that speculate this step; ``{index in fed: drafts}``."""
        self._forget_gone(running)
        chosen = self._chosen(fed)
        drafts = self._propose([fed[index] for index in chosen])
        added = {}
        for index, draft in zip(chosen, drafts):
            req = fed[index]
            draft = self._grammatical(req, draft[: self._drafts_that_fit(req, len(draft), memory)])
            if draft and memory.ensure_pages(req, req.num_cached_tokens + 1 + len(draft)):
                feeds[index] = feeds[index] + draft
                added[index] = draft
        return added

    def _chosen(self, fed: list[Req]) -> list[int]:
        """Indices in ``fed`` of the requests that speculate: none when the step decodes past max_batch."""
        decoding = [index for index, req in enumerate(fed) if not req.is_prefilling]
        if len(decoding) > self.max_batch:
            return []
        return [index for index in decoding if self.may_speculate(fed[index])]

    def _drafts_that_fit(self, req: Req, wanted: int, memory: "RequestKVMemory") -> int:
        """How many of ``wanted`` drafts the request's pages and the free pages hold (no eviction)."""
        slots = (len(req.pages) + memory.page_allocator.num_free) * memory.page_size
        return max(0, min(wanted, slots - req.num_cached_tokens - 1))

    def _propose(self, reqs: list[Req]) -> list[list[int]]:
        if not reqs:
            return []
        views = [DraftRequest(req.rid, tuple(req.all_token_ids), len(req.input_ids), self.max_drafts(req))
                 for req in reqs]
        self.shown.update(req.rid for req in reqs)
        try:
            drafts = self.proposer.propose(views)
            return [self._checked(draft, view.max_drafts) for draft, view in zip(drafts, views, strict=True)]
        except Exception:
            self.failures.record("speculative_proposer", f"the proposer failed drafting for {len(reqs)} requests",
                                 plugin=self.plugin_name)
            return [[] for _ in reqs]

    def _grammatical(self, req: Req, draft: list[int]) -> list[int]:
        """The drafts the request's grammar allows (all of them without one); none when its matcher fails."""
        if req.grammar is None or not draft:
            return draft
        try:
            return allowed_drafts(req.grammar, draft, self.vocab_size)
        except Exception:
            # The matcher is a plugin; the step that emits the request's token will meet the failure again.
            self.failures.record("grammar", f"checking the drafts of request {req.rid!r} against its grammar failed")
            return []

    def _checked(self, draft, max_drafts: int) -> list[int]:
        draft = list(draft)[:max_drafts]
        if not all(type(token) is int and 0 <= token < self.vocab_size for token in draft):
            raise ValueError(f"a draft holds something other than token ids of the vocabulary: {draft!r}")
        return draft

    def _forget_gone(self, running: tuple[Req, ...]) -> None:
        gone = self.shown - {req.rid for req in running}
        for rid in gone:
            try:
                self.proposer.forget(rid)
            except Exception:
                self.failures.record("speculative_proposer", f"the proposer failed forgetting {rid!r}",
                                     plugin=self.plugin_name)
        self.shown -= gone

    def record(self, num_drafts: int, num_accepted: int) -> None:
        stats = self.stats
        self.stats = SpeculationStats(
            stats.proposer, stats.num_verifications + 1, stats.num_draft_tokens + num_drafts,
            stats.num_accepted_tokens + num_accepted,
        )
