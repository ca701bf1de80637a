"""A request as the scheduler sees it."""

from __future__ import annotations

from dataclasses import dataclass, field

from tercet.messages import FinishReason
from tercet.sampling_params import SamplingParams


@dataclass(eq=False)
class Req:
    rid: str
    input_ids: list[int]
    sampling_params: SamplingParams
    arrival_index: int
    output_ids: list[int] = field(default_factory=list)
    # KV memory, held from admission to finish.
    req_pool_index: int | None = None
    pages: list[int] = field(default_factory=list)
    # Tokens whose K/V are already in the cache; the rest are fed next step.
    num_cached_tokens: int = 0
    finish_reason: FinishReason | None = None
    # Output ids already sent to the detokenizer.
    num_sent_tokens: int = 0

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
        return self.finish_reason is not None

    def tokens_to_feed(self) -> list[int]:
        return self.all_token_ids[self.num_cached_tokens:]
