"""A request as the scheduler sees it: one completion of one prompt."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tercet.ipc.messages import FinishReason, TokenLogprobs
from tercet.sampling_params import SamplingParams
from tercet.scheduler.request_status import RequestStatus


@dataclass(frozen=True)
class EmbeddingReq:
    """An input to embed: it runs once, whole, and its final hidden states are pooled
    (:mod:`tercet.scheduler.embeddings`)."""

    rid: str
    input_ids: list[int]


@dataclass(eq=False)
class Req:
    rid: str
    input_ids: list[int]
    sampling_params: SamplingParams
    arrival_index: int
    # Higher runs first under the "priority" policy.
    priority: int = 0
    # Who the request is for (fair-share scheduling); None when not given.
    tenant: str | None = None
    # The LoRA adapter it runs with (None: the base model); its KV is cached under it alone.
    lora_name: str | None = None
    # The seed of this completion (the n completions of a prompt each get their own).
    seed: int = 0
    # When the scheduler received it, first admitted it and sent its first output token
    # (time.monotonic), for the queue, prefill and decode time histograms (tercet.scheduler.request_times).
    arrived_at: float = field(default_factory=time.monotonic)
    admitted_at: float | None = None
    first_token_at: float | None = None
    output_ids: list[int] = field(default_factory=list)
    # Moved only by RequestQueues (see tercet.scheduler.request_status).
    status: RequestStatus = RequestStatus.NEW
    # The other completions of the same prompt (n > 1): they wait with this
    # request, are admitted with it, and take its prompt's KV and last logits
    # instead of prefilling the prompt again.
    followers: list["Req"] = field(default_factory=list)
    # For a follower: the completion whose prompt it still waits on (the other end of ``followers``).
    leader: "Req | None" = field(default=None, repr=False)
    # KV memory, held from admission to finish (or retraction).
    req_pool_index: int | None = None
    pages: list[int] = field(default_factory=list)
    # Of those pages, the ones the prefix cache owns (shared; never freed by the request).
    tree_pages: set[int] = field(default_factory=set)
    # The prefix-cache node this request holds locked, if any.
    prefix_node: object | None = None
    # Tokens whose K/V are already in the cache; the rest are fed in later steps.
    num_cached_tokens: int = 0
    # Prompt tokens found in the prefix cache when the request was first admitted.
    num_prefix_cache_hits: int | None = None
    num_retractions: int = 0
    finish_reason: FinishReason | None = None
    # Output ids already sent to the detokenizer.
    num_sent_tokens: int = 0
    has_sent_output: bool = False
    # Log-probabilities not sent yet.
    unsent_logprobs: list[float] = field(default_factory=list)
    unsent_top_logprobs: list[list] = field(default_factory=list)
    prompt_logprobs: TokenLogprobs | None = None
    # The completion's place in its output constraint, if it has one
    # (a tercet.scheduler.grammar.grammar_backend.GrammarMatcher).
    grammar: object | None = None

    @property
    def all_token_ids(self) -> list[int]:
        return self.input_ids + self.output_ids

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids) + len(self.output_ids)

    @property
    def max_num_tokens(self) -> int:
        """The most tokens this request can ever hold in the KV cache."""
        # The last sampled token is never fed back, so it needs no KV slot.
        return len(self.input_ids) + max(self.sampling_params.max_new_tokens - 1, 0)

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    @property
    def group(self) -> list["Req"]:
        """This request and its followers: what is admitted together."""
        return [self, *self.followers]

    @property
    def is_waiting_for_leader(self) -> bool:
        """An n > 1 completion that is not fed yet: it takes its leader's prompt KV when that is done."""
        return self.leader is not None

    # -- the group's links; RequestQueues keeps them (and the queues) consistent --

    def lead(self, followers: list["Req"]) -> None:
        self.followers = list(followers)
        for follower in self.followers:
            follower.leader = self

    def release_followers(self) -> list["Req"]:
        """Let every follower go on alone; they are returned."""
        followers, self.followers = self.followers, []
        for follower in followers:
            follower.leader = None
        return followers

    def leave_leader(self) -> None:
        self.leader.followers.remove(self)
        self.leader = None

    def hand_over_followers(self) -> "Req | None":
        """The next completion leads the rest of the group; it is returned (None without followers)."""
        followers = self.release_followers()
        if not followers:
            return None
        successor = followers[0]
        successor.lead(followers[1:])
        return successor

    @property
    def needs_prefill_only(self) -> bool:
        """max_tokens = 0 with prompt log-probabilities: run the prompt, sample nothing."""
        return self.sampling_params.max_new_tokens == 0

    def tokens_to_feed(self) -> list[int]:
        return self.all_token_ids[self.num_cached_tokens:]

    @property
    def is_prefilling(self) -> bool:
        """More than the last sampled token is still to be fed (a prompt, or a resumed request)."""
        return self.num_tokens - self.num_cached_tokens > 1 or not self.output_ids
