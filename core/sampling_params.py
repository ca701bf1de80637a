"""Per-request sampling parameters, validated where the request enters."""

from __future__ import annotations

from dataclasses import dataclass, field

from tercet.errors import RequestError


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    # None means "pick one": the TokenizerManager fills a random seed so every
    # request's randomness is reproducible from what the scheduler received.
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True

    def validate(self) -> None:
        if not isinstance(self.max_new_tokens, int) or isinstance(self.max_new_tokens, bool) or self.max_new_tokens < 0:
            raise RequestError(f"max_tokens must be a non-negative integer, got {self.max_new_tokens!r}", "max_tokens")
        if not _is_number(self.temperature) or self.temperature < 0:
            raise RequestError(f"temperature must be a number >= 0, got {self.temperature!r}", "temperature")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise RequestError(f"top_p must be in (0, 1], got {self.top_p!r}", "top_p")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise RequestError(f"seed must be an integer, got {self.seed!r}", "seed")
        if not all(isinstance(t, int) and t >= 0 for t in self.stop_token_ids):
            raise RequestError("stop_token_ids must be a list of non-negative integers", "stop_token_ids")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
