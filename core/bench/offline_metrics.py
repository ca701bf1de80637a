"""What both offline runs record (when each request got each token) and the figures made from it.

Both engines hand back a :class:`TokenTimeline`: the start time, the end time,
and for every request the output ids with the time each one became known
to the host. :func:`summarize` turns it into the same figures for either engine,
so the two sections of a report are computed by one piece of code.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field


@dataclass
class TokenTimeline:
    num_requests: int
    started: float = 0.0
    ended: float = 0.0
    # Per request: its output ids, and the perf_counter time each one arrived.
    output_ids: list[list[int]] = field(default_factory=list)
    token_times: list[list[float]] = field(default_factory=list)
    # Steps (forward passes) run after every request had its first token.
    num_decode_steps: int = 0

    def __post_init__(self):
        self.output_ids = [[] for _ in range(self.num_requests)]
        self.token_times = [[] for _ in range(self.num_requests)]

    def record(self, request: int, token_ids: list[int], now: float) -> None:
        self.output_ids[request].extend(token_ids)
        self.token_times[request].extend([now] * len(token_ids))

    @property
    def all_have_first_token(self) -> bool:
        return all(self.token_times)


def summarize(timeline: TokenTimeline, num_prompt_tokens: int) -> dict:
    """Wall times, throughputs, step time and inter-token latency, as plain numbers."""
    total_s = timeline.ended - timeline.started
    first_token_s = [times[0] - timeline.started for times in timeline.token_times if times]
    # Prefill is over when the last request has its first token.
    prefill_s = max(first_token_s) if first_token_s else total_s
    decode_s = total_s - prefill_s
    num_output_tokens = sum(len(ids) for ids in timeline.output_ids)
    num_decode_tokens = num_output_tokens - len(first_token_s)
    itls = [
        (times[-1] - times[0]) / (len(times) - 1) for times in timeline.token_times if len(times) > 1
    ]
    return {
        "num_requests": timeline.num_requests,
        "num_prompt_tokens": num_prompt_tokens,
        "num_output_tokens": num_output_tokens,
        "total_s": total_s,
        "prefill_s": prefill_s,
        "decode_s": decode_s,
        "output_tokens_per_s": _rate(num_output_tokens, total_s),
        "total_tokens_per_s": _rate(num_prompt_tokens + num_output_tokens, total_s),
        "prefill_tokens_per_s": _rate(num_prompt_tokens, prefill_s),
        "decode_tokens_per_s": _rate(num_decode_tokens, decode_s),
        "num_decode_steps": timeline.num_decode_steps,
        "mean_decode_step_ms": 1000 * decode_s / timeline.num_decode_steps if timeline.num_decode_steps else None,
        "mean_ttft_ms": 1000 * statistics.fmean(first_token_s) if first_token_s else None,
        # Each request's (last - first token time) / (tokens - 1), averaged over requests.
        "mean_itl_ms": 1000 * statistics.fmean(itls) if itls else None,
    }


def _rate(count: int, seconds: float) -> float | None:
    return count / seconds if seconds > 0 else None


def compare_outputs(ours: list[list[int]], theirs: list[list[int]]) -> dict:
    """How many requests produced exactly the same ids, and where the first one differs."""
    first_mismatch = None
    num_matching = 0
    for request, (a, b) in enumerate(zip(ours, theirs)):
        if a == b:
            num_matching += 1
        elif first_mismatch is None:
            position = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            first_mismatch = {"request": request, "position": position}
    return {
        "all_match": num_matching == len(ours) == len(theirs),
        "num_matching_requests": num_matching,
        "num_requests": len(ours),
        "first_mismatch": first_mismatch,
    }


class Progress:
    """Progress lines on stderr; ``every`` prints only when ``interval_s`` passed since the last line."""

    def __init__(self, enabled: bool = True, interval_s: float = 5.0):
        self.enabled = enabled
        self.interval_s = interval_s
        self.started = time.monotonic()
        self.last_throttled = self.started

    def __call__(self, message: str) -> None:
        now = self.last_throttled = time.monotonic()
        if self.enabled:
            print(f"[bench {now - self.started:6.1f}s] {message}", file=sys.stderr, flush=True)

    def every(self, message: str) -> None:
        if time.monotonic() - self.last_throttled >= self.interval_s:
            self(message)
