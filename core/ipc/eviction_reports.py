"""What a scheduler rank's prefix cache evicted, told to the API workers so routing stops counting on it.

A load balancer that routes by prefix (the built-in ``cache_aware``) keeps its own guess of
what each rank caches. The rank's radix cache alone knows what it evicted, so each rank
reports it, batched between steps, to every API worker (as it sends its figures for
``/metrics``). One report is columns, one entry per evicted subtree: the tokens from the root
through the first page the rank dropped, how many of them it still holds, and the LoRA
adapter whose tree it was (None: the base model's).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvictedPrefixesReport:
    rank: int
    token_ids: list[list[int]]
    num_kept_tokens: list[int]
    lora_names: list[str | None]

    @property
    def is_well_formed(self) -> bool:
        """Columns of one length, each kept count inside its prefix (a forged report may say anything)."""
        return (len(self.token_ids) == len(self.num_kept_tokens) == len(self.lora_names)
                and all(0 <= kept < len(tokens) for tokens, kept in zip(self.token_ids, self.num_kept_tokens)))


EVICTION_REPORT_MESSAGE_TYPES = {
    "tercet.evicted_prefixes_report": EvictedPrefixesReport,
}
