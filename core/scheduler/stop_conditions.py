"""When a request is done: EOS, a stop token, a stop string, or its length."""

from __future__ import annotations

from tercet.ipc.messages import FinishKind, FinishReason
from tercet.scheduler.req import Req

# Extra tokens decoded before the newest one, beyond the longest stop string's
# length in characters, so a stop string split over tokens is still seen whole.
STOP_WINDOW_SLACK_TOKENS = 4


class StopConditions:
    def __init__(self, eos_token_ids: set[int], tokenizer):
        self.eos_token_ids = eos_token_ids
        self.tokenizer = tokenizer

    def check(self, req: Req) -> FinishReason | None:
        params = req.sampling_params
        num_generated = len(req.output_ids)
        token_id = req.output_ids[-1]
        # min_tokens holds back EOS and stop tokens only (they are suppressed while
        # sampling); stop strings always apply, as the detokenizer trims at the first one.
        if num_generated >= params.min_new_tokens:
            if token_id in params.stop_token_ids or (not params.ignore_eos and token_id in self.eos_token_ids):
                return FinishReason(FinishKind.STOP, matched_token=token_id)
        if params.stop:
            matched = self.matched_stop_string(req)
            if matched is not None:
                return FinishReason(FinishKind.STOP, matched_text=matched)
        if num_generated >= params.max_new_tokens:
            return FinishReason(FinishKind.LENGTH)
        return None

    def matched_stop_string(self, req: Req) -> str | None:
        """The stop string that the newest token completed, earliest in the text first."""
        params = req.sampling_params
        window = max(len(stop) for stop in params.stop) + STOP_WINDOW_SLACK_TOKENS
        tail = self.tokenizer.decode(req.output_ids[-window:], skip_special_tokens=params.skip_special_tokens)
        # Earliest start wins, then the shorter string: the detokenizer's rule.
        positions = [(tail.find(stop), len(stop), stop) for stop in params.stop if stop in tail]
        return min(positions)[2] if positions else None

    def expected_stop_token_ids(self, req: Req) -> set[int]:
        """Tokens to suppress while the request is still short of min_tokens."""
        params = req.sampling_params
        if params.min_new_tokens == 0:
            return set()
        suppressed = set(params.stop_token_ids)
        if not params.ignore_eos:
            suppressed |= self.eos_token_ids
        return suppressed
