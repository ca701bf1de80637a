"""From request outcomes to throughput and latency statistics.

Only completed requests count towards tokens, throughput and latencies;
failed ones are counted, and their errors tallied, but a half-finished stream
says nothing reliable about speed. Inter-token latencies are pooled over all
completed requests, so a long request weighs more than a short one — as each
token does for a reader. Input tokens are the server's own count (from
usage) where it gives one, else the benchmark's.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from tercet.bench.streaming_client import RequestOutcome

MAX_DISTINCT_ERRORS = 5


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0 to 100) of ``values``, interpolating linearly between the two
    nearest ranks: the sorted values sit at ranks 0 … n-1 and ``p`` maps to rank ``p/100·(n-1)``."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is not between 0 and 100")
    ordered = sorted(values)
    rank = p / 100 * (len(ordered) - 1)
    below = math.floor(rank)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (rank - below)


@dataclass(frozen=True)
class LatencyStats:
    """Milliseconds."""

    mean: float
    p50: float
    p99: float

    @classmethod
    def of_seconds(cls, seconds: Sequence[float]) -> LatencyStats | None:
        if not seconds:
            return None
        milliseconds = [value * 1000 for value in seconds]
        return cls(sum(milliseconds) / len(milliseconds), percentile(milliseconds, 50), percentile(milliseconds, 99))


@dataclass(frozen=True)
class BenchSummary:
    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    requests_per_s: float
    input_tokens_per_s: float
    output_tokens_per_s: float
    ttft: LatencyStats | None
    itl: LatencyStats | None
    e2e_latency: LatencyStats | None
    # "chunk": one streamed text chunk counted as one token; "token": the server said per chunk.
    itl_basis: str
    errors: tuple[tuple[str, int], ...]  # the most frequent distinct errors, with their counts


def summarize(outcomes: Sequence[RequestOutcome], duration_s: float) -> BenchSummary:
    completed = [outcome for outcome in outcomes if outcome.is_success]
    input_tokens = sum(_input_tokens(outcome) for outcome in completed)
    output_tokens = sum(outcome.output_tokens for outcome in completed)
    errors = Counter(outcome.error for outcome in outcomes if not outcome.is_success)
    return BenchSummary(
        completed=len(completed),
        failed=len(outcomes) - len(completed),
        duration_s=duration_s,
        total_input_tokens=input_tokens,
        total_output_tokens=output_tokens,
        requests_per_s=_rate(len(completed), duration_s),
        input_tokens_per_s=_rate(input_tokens, duration_s),
        output_tokens_per_s=_rate(output_tokens, duration_s),
        **_latencies(completed),
        itl_basis=_itl_basis(completed),
        errors=tuple(errors.most_common(MAX_DISTINCT_ERRORS)),
    )


def _latencies(completed: Sequence[RequestOutcome]) -> dict[str, LatencyStats | None]:
    return {
        "ttft": LatencyStats.of_seconds([outcome.ttft for outcome in completed if outcome.ttft is not None]),
        "itl": LatencyStats.of_seconds([gap for outcome in completed for gap in outcome.itl]),
        "e2e_latency": LatencyStats.of_seconds([outcome.latency for outcome in completed]),
    }


def _itl_basis(completed: Sequence[RequestOutcome]) -> str:
    every_chunk_counted_tokens = bool(completed) and all(outcome.has_tokens_per_chunk for outcome in completed)
    return "token" if every_chunk_counted_tokens else "chunk"


def _input_tokens(outcome: RequestOutcome) -> int:
    return outcome.server_prompt_tokens if outcome.server_prompt_tokens is not None else outcome.prompt_len


def _rate(count: float, duration_s: float) -> float:
    return count / duration_s if duration_s > 0 else 0.0
