"""Per-request sampling parameters, and the one table of their ranges.

Names follow SGLang's native API; the OpenAI routes map their names onto these
(``max_tokens`` -> ``max_new_tokens``, ``logprobs``/``top_logprobs`` ->
``return_logprob``/``top_logprobs_num``, ``echo`` -> ``return_prompt_logprob``).

:data:`FIELD_RANGES` is the one table of every numeric field's range:
:meth:`SamplingParams.validate` checks it and ``GET /openapi.json`` documents it,
so the two cannot drift apart. Every integer range fits in what the wire format
carries (msgpack: 64 bits) and what the scheduler stores (int64 tensors; a seed
up to 2**64 - 1 is folded into int64 there), so an accepted value can always be
sent and used.

A request's parameters are validated once, where they are built at the HTTP
edge (:func:`tercet.http.sampling_fields.checked_sampling_params`, against the
served vocabulary); the TokenizerManager trusts them. The scheduler validates
what arrives on edge 1 again, since over the tcp transport anything that can
connect can send.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tercet.errors import RequestError
from tercet.field_checks import IntRange, NumberRange, check_non_empty_text, check_text

MAX_TOP_LOGPROBS = 20
MAX_N = 16
MAX_STOP_STRINGS = 16
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
UINT64_MAX = (1 << 64) - 1
# Token ids are 32-bit in every tokenizer library; the bound for token ids and
# top_k when the vocabulary size is not known.
MAX_VOCAB_SIZE = INT32_MAX
# Far past any context length (which the TokenizerManager checks), and within int32.
MAX_TOKEN_COUNT = INT32_MAX

TOKEN_ID = IntRange(0, MAX_VOCAB_SIZE - 1, vocab_offset=-1)

# Every numeric SamplingParams field's range; for stop_token_ids each id's, for
# logit_bias each bias's (its keys are TOKEN_IDs).
FIELD_RANGES: dict[str, IntRange | NumberRange] = {
    "max_new_tokens": IntRange(0, MAX_TOKEN_COUNT),
    "min_new_tokens": IntRange(0, MAX_TOKEN_COUNT),
    "temperature": NumberRange(0.0, 100.0),
    "top_p": NumberRange(0.0, 1.0, exclusive_minimum=True),
    "top_k": IntRange(-1, MAX_VOCAB_SIZE, vocab_offset=0),
    "min_p": NumberRange(0.0, 1.0),
    "frequency_penalty": NumberRange(-2.0, 2.0),
    "presence_penalty": NumberRange(-2.0, 2.0),
    "repetition_penalty": NumberRange(0.0, 10.0, exclusive_minimum=True),
    # Signed or unsigned: what a 64-bit wire format can carry.
    "seed": IntRange(INT64_MIN, UINT64_MAX),
    "stop_token_ids": TOKEN_ID,
    "logit_bias": NumberRange(-100.0, 100.0),
    "n": IntRange(1, MAX_N),
    "top_logprobs_num": IntRange(0, MAX_TOP_LOGPROBS),
}
# validate names parameters the OpenAI way; /generate renames them back.
OPENAI_PARAM_NAMES = {
    "max_new_tokens": "max_tokens",
    "min_new_tokens": "min_tokens",
    "top_logprobs_num": "top_logprobs",
    "json_schema": "response_format",
}
# The constraints a grammar backend compiles; a request sets at most one.
CONSTRAINT_FIELDS = ("json_schema", "regex", "ebnf")
FLAG_FIELDS = (
    "ignore_eos", "skip_special_tokens", "no_stop_trim", "return_logprob", "return_prompt_logprob", "speculative",
)


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
    # Constrained decoding: a JSON Schema (as JSON text), a regular expression
    # or an EBNF grammar the output must match; at most one. The scheduler's
    # grammar backend compiles it and masks every step's logits.
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    # With a constraint: the output may first reason, freely, from reasoning_start ("":
    # the prompt opened the reasoning, so the output starts inside it) to reasoning_end;
    # the constraint applies to what follows (tercet.reasoning.parser.ReasoningFrame).
    reasoning_start: str | None = None
    reasoning_end: str | None = None
    # Let the scheduler's speculative proposer draft for this request ([speculative]
    # proposer); false opts out. The output is the same either way.
    speculative: bool = True

    def validate(self, vocab_size: int | None = None) -> None:
        """Refuse a value outside its :data:`FIELD_RANGES` range (token ids and top_k
        past the vocabulary too, when its size is given), bad stop strings or flags,
        and more than one constraint, or one with what it rules out. Errors name
        parameters the OpenAI way (:data:`OPENAI_PARAM_NAMES`)."""
        self._check_ranges(vocab_size)
        self._check_stop_strings()
        self._check_flags()
        self._check_constraint()

    def _check_ranges(self, vocab_size: int | None) -> None:
        if not isinstance(self.stop_token_ids, list):
            raise RequestError("stop_token_ids must be a list of token ids", "stop_token_ids")
        if not isinstance(self.logit_bias, dict):
            raise RequestError("logit_bias must map token ids to numbers", "logit_bias")
        for name, value in self._ranged_values():
            param = OPENAI_PARAM_NAMES.get(name, name)
            subject = f"each token id in {param}" if name == "stop_token_ids" else None
            FIELD_RANGES[name].check(value, param, vocab_size, subject)
        if self.min_new_tokens > self.max_new_tokens:
            raise RequestError(
                f"min_tokens ({self.min_new_tokens}) must not exceed max_tokens ({self.max_new_tokens})", "min_tokens"
            )
        for token_id in self.logit_bias:
            TOKEN_ID.check(token_id, "logit_bias", vocab_size, "each logit_bias key")

    def _check_stop_strings(self) -> None:
        if not isinstance(self.stop, list) or not all(isinstance(s, str) and s for s in self.stop):
            raise RequestError("stop must be a non-empty string or a list of non-empty strings", "stop")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise RequestError(f"at most {MAX_STOP_STRINGS} stop strings are allowed", "stop")
        for stop in self.stop:
            check_text(stop, "stop")

    def _check_flags(self) -> None:
        for name in FLAG_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise RequestError(f"{name} must be true or false", name)

    def _check_constraint(self) -> None:
        constraints = [name for name in CONSTRAINT_FIELDS if getattr(self, name) is not None]
        if len(constraints) > 1:
            raise RequestError(f"give at most one of {', '.join(CONSTRAINT_FIELDS)}; got {', '.join(constraints)}",
                               constraints[1])
        if constraints and self.min_new_tokens:
            # The grammar may allow nothing but EOS before min_tokens are out.
            raise RequestError("min_tokens cannot be combined with a constrained output", "min_tokens")
        for name in constraints:
            check_non_empty_text(getattr(self, name), OPENAI_PARAM_NAMES.get(name, name))
        self._check_reasoning_frame()

    def _check_reasoning_frame(self) -> None:
        if self.reasoning_start is None and self.reasoning_end is None:
            return
        if self.reasoning_start is None or self.reasoning_end is None:
            raise RequestError("reasoning_start and reasoning_end come together", "reasoning_end")
        if not isinstance(self.reasoning_start, str):
            raise RequestError("reasoning_start must be a string", "reasoning_start")
        check_text(self.reasoning_start, "reasoning_start")
        check_non_empty_text(self.reasoning_end, "reasoning_end")

    @property
    def grammar_key(self) -> tuple[str, str, str | None, str | None] | None:
        """What a compiled grammar is for: the constraint, and the reasoning before it."""
        constraint = self.constraint
        return None if constraint is None else (*constraint, self.reasoning_start, self.reasoning_end)

    @property
    def constraint(self) -> tuple[str, str] | None:
        """``(kind, text)`` of the request's output constraint, if it has one."""
        for name in CONSTRAINT_FIELDS:
            value = getattr(self, name)
            if value is not None:
                return name, value
        return None

    def _ranged_values(self):
        """``(field, value)`` for every value :data:`FIELD_RANGES` bounds, in table order."""
        for name in FIELD_RANGES:
            value = getattr(self, name)
            if name == "stop_token_ids":
                yield from ((name, token_id) for token_id in value)
            elif name == "logit_bias":
                yield from ((name, bias) for bias in value.values())
            elif not (name == "seed" and value is None):  # None: the TokenizerManager picks one
                yield name, value
