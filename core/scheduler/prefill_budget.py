"""How many prompt tokens a step may prefill, sized by what steps cost on this machine.

While nothing decodes, a step takes up to ``[scheduler] chunked_prefill_size``
prompt tokens: the prompt's time to first token is all that waits. While
requests decode, every prompt token in a step delays their next token, so the
step takes as many as keep it within ``[scheduler] max_decode_slowdown`` times
a step that only decodes: a long prompt arriving among streaming requests is
prefilled in chunks that hold their inter-token latency to that bound.

The costs are learnt from the steps themselves, not set: a moving average of
the decode-only steps' time, and of a prompt token's share of the steps that
prefill (its time less the decoding's, per prompt token). A prompt's attention
grows with its length, so a prompt token costs more deep into a long prompt;
the average follows it chunk by chunk. Until a prompt step has been seen the
whole ``chunked_prefill_size`` is allowed. The chunking changes no token: every
row computes as it would alone (the attention and matmul kernels are
batch-invariant), so the budget is free to vary with the machine's load.
"""

from __future__ import annotations

# The fewest prompt tokens a step takes while requests decode, so that a prompt always advances.
MIN_CHUNK_TOKENS = 32
# The weight of the newest step in the moving averages: recent steps matter most, since the decoding
# batch and the prompt's depth change from step to step.
NEWEST_WEIGHT = 0.3


def _moving_average(average: float | None, sample: float) -> float:
    return sample if average is None else average + NEWEST_WEIGHT * (sample - average)


class PrefillBudget:
    def __init__(self, chunked_prefill_size: int, max_decode_slowdown: float):
        self.chunked_prefill_size = chunked_prefill_size
        # 0: off (every step may take chunked_prefill_size); else at least 1 (the config checks it).
        self.max_decode_slowdown = max_decode_slowdown
        self.decode_step_seconds: float | None = None
        self.prompt_token_seconds: float | None = None

    def tokens(self, num_decoding: int) -> int:
        """The prompt tokens the next step may prefill, with ``num_decoding`` requests decoding in it."""
        if num_decoding == 0 or not self.max_decode_slowdown or None in (self.decode_step_seconds,
                                                                          self.prompt_token_seconds):
            return self.chunked_prefill_size
        allowed = (self.max_decode_slowdown - 1) * self.decode_step_seconds / self.prompt_token_seconds
        return min(self.chunked_prefill_size, max(MIN_CHUNK_TOKENS, int(allowed)))

    def record(self, num_decoding: int, prompt_tokens: int, seconds: float) -> None:
        """A step's forward pass took ``seconds`` for ``num_decoding`` decoding rows and ``prompt_tokens``."""
        if prompt_tokens == 0:
            if num_decoding:
                self.decode_step_seconds = _moving_average(self.decode_step_seconds, seconds)
            return
        decoding = (self.decode_step_seconds or 0.0) if num_decoding else 0.0
        per_token = max(seconds - decoding, 0.0) / prompt_tokens
        if per_token > 0:
            self.prompt_token_seconds = _moving_average(self.prompt_token_seconds, per_token)

    @property
    def learnt(self) -> dict[str, float | None]:
        """The costs learnt so far, in milliseconds (None: no such step seen yet)."""
        return {"decode_step_ms": None if self.decode_step_seconds is None else self.decode_step_seconds * 1e3,
                "prompt_token_ms": None if self.prompt_token_seconds is None else self.prompt_token_seconds * 1e3}
