"""Per-request sampling parameters, validated where the request enters.

Names follow SGLang's native API; the OpenAI routes map their names onto these
(``max_tokens`` -> ``max_new_tokens``, ``logprobs``/``top_logprobs`` ->
``return_logprob``/``top_logprobs_num``, ``echo`` -> ``return_prompt_logprob``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tercet.errors import RequestError

MAX_TOP_LOGPROBS = 20
MAX_N = 16
MAX_STOP_STRINGS = 16


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    # EOS and stop tokens are ignored until this many tokens were generated.
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 (or 0): no top-k filtering
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    # None means "pick one": the TokenizerManager fills a random seed so every
    # request's randomness is reproducible from what the scheduler received.
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    # Keep the matched stop string in the returned text.
    no_stop_trim: bool = False
    # token id -> bias added to its logit before sampling
    logit_bias: dict[int, float] = field(default_factory=dict)
    # Several completions of one prompt; the prompt is prefilled once.
    n: int = 1
    return_logprob: bool = False
    top_logprobs_num: int = 0
    # Log-probabilities of the prompt tokens too (OpenAI's echo with logprobs).
    return_prompt_logprob: bool = False

    def validate(self, vocab_size: int | None = None) -> None:
        _check_int(self.max_new_tokens, "max_tokens", minimum=0)
        _check_int(self.min_new_tokens, "min_tokens", minimum=0)
        if self.min_new_tokens > self.max_new_tokens:
            raise RequestError(
                f"min_tokens ({self.min_new_tokens}) must not exceed max_tokens ({self.max_new_tokens})", "min_tokens"
            )
        _check_number(self.temperature, "temperature", 0.0, 100.0)
        _check_number(self.top_p, "top_p", 0.0, 1.0, exclusive_minimum=True)
        _check_int(self.top_k, "top_k", minimum=-1)
        _check_number(self.min_p, "min_p", 0.0, 1.0)
        _check_number(self.frequency_penalty, "frequency_penalty", -2.0, 2.0)
        _check_number(self.presence_penalty, "presence_penalty", -2.0, 2.0)
        _check_number(self.repetition_penalty, "repetition_penalty", 0.0, 10.0, exclusive_minimum=True)
        if self.seed is not None:
            # What a 64-bit wire format can carry.
            _check_int(self.seed, "seed", minimum=-(1 << 63), maximum=(1 << 64) - 1)
        if not isinstance(self.stop, list) or not all(isinstance(s, str) and s for s in self.stop):
            raise RequestError("stop must be a non-empty string or a list of non-empty strings", "stop")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise RequestError(f"at most {MAX_STOP_STRINGS} stop strings are allowed", "stop")
        if not isinstance(self.stop_token_ids, list):
            raise RequestError("stop_token_ids must be a list of token ids", "stop_token_ids")
        for token_id in self.stop_token_ids:
            _check_token_id(token_id, "stop_token_ids", vocab_size)
        if not isinstance(self.logit_bias, dict):
            raise RequestError("logit_bias must map token ids to numbers", "logit_bias")
        for token_id, bias in self.logit_bias.items():
            _check_token_id(token_id, "logit_bias", vocab_size)
            _check_number(bias, "logit_bias", -100.0, 100.0)
        _check_int(self.n, "n", minimum=1, maximum=MAX_N)
        _check_int(self.top_logprobs_num, "top_logprobs", minimum=0, maximum=MAX_TOP_LOGPROBS)
        for name in ("ignore_eos", "skip_special_tokens", "no_stop_trim", "return_logprob", "return_prompt_logprob"):
            if not isinstance(getattr(self, name), bool):
                raise RequestError(f"{name} must be true or false", name)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0


def _check_int(value, name: str, minimum: int | None = None, maximum: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise RequestError(f"{name} must be an integer, got {value!r}", name)
    if minimum is not None and value < minimum:
        raise RequestError(f"{name} must be at least {minimum}, got {value}", name)
    if maximum is not None and value > maximum:
        raise RequestError(f"{name} must be at most {maximum}, got {value}", name)


def _check_number(value, name: str, minimum: float, maximum: float, exclusive_minimum: bool = False) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        raise RequestError(f"{name} must be a number, got {value!r}", name)
    too_small = value <= minimum if exclusive_minimum else value < minimum
    if too_small or value > maximum:
        bracket = "(" if exclusive_minimum else "["
        raise RequestError(f"{name} must be in {bracket}{minimum:g}, {maximum:g}], got {value!r}", name)


def _check_token_id(value, name: str, vocab_size: int | None) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or (vocab_size is not None and value >= vocab_size):
        limit = f" below {vocab_size}" if vocab_size is not None else ""
        raise RequestError(f"{name} must hold token ids (integers >= 0{limit}), got {value!r}", name)
