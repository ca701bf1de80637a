"""The body of ``POST /generate`` (SGLang's native API) -> :class:`NativeRequest`.

``text`` (or ``input_ids``) may be a list of prompts, a batch: the answer is
then a list, one object per completion in order (``index = prompt × n + i``).
``sampling_params`` takes every :class:`SamplingParams` field by its own name.
Log-probabilities are asked for at the top level, as SGLang does:
``return_logprob``, ``top_logprobs_num``, ``return_prompt_logprob`` (tercet's
name) or SGLang's ``logprob_start_len`` (prompt log-probabilities from that
position on; ``-1``, the default, for none) and ``return_text_in_logprobs``.
The output constraints are SGLang's too: ``sampling_params.json_schema`` (JSON
text, or the schema as an object), ``regex`` or ``ebnf``, at most one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tercet.errors import RequestError
from tercet.field_checks import IntRange, check_non_empty_text, check_text, check_texts, shown
from tercet.frontend.io_struct import GenerateRequest
from tercet.http.sampling_fields import (
    checked_sampling_params,
    parse_flag,
    parse_logit_bias,
    parse_stop,
    parse_token_ids,
    parse_top_logprobs,
)
from tercet.http.structured_output import parse_native_json_schema
from tercet.sampling_params import MAX_TOKEN_COUNT, OPENAI_PARAM_NAMES, SamplingParams

SAMPLING_PARAM_NAMES = tuple(field.name for field in dataclasses.fields(SamplingParams))
# SamplingParams.validate names parameters the OpenAI way; here they keep their own names.
NATIVE_PARAM_NAMES = {openai: native for native, openai in OPENAI_PARAM_NAMES.items()}
TOP_LEVEL_FLAGS = ("return_logprob", "return_prompt_logprob", "return_text_in_logprobs")
LOGPROB_START_LEN = IntRange(-1, MAX_TOKEN_COUNT)


@dataclass(frozen=True)
class NativeRequest:
    generate_request: GenerateRequest
    # Prompt log-probabilities are reported from this prompt position on.
    logprob_start_len: int = 0
    return_text_in_logprobs: bool = False

    @property
    def sampling_params(self) -> SamplingParams:
        return self.generate_request.sampling_params


def parse_generate_request(body: dict, vocab_size: int | None = None) -> NativeRequest:
    prompt = _parse_prompt(body, vocab_size)
    stream = parse_flag(body, "stream")
    rid = body.get("rid")
    if rid is not None:
        check_non_empty_text(rid, "rid")
    raw = _sampling_params_object(body.get("sampling_params"))
    flags = _top_level_flags(body, raw)
    logprob_start_len = body.get("logprob_start_len")
    if logprob_start_len is None:
        logprob_start_len = -1
    LOGPROB_START_LEN.check(logprob_start_len, "logprob_start_len")
    if body.get("top_logprobs_num") is not None:
        raw["top_logprobs_num"] = parse_top_logprobs(body["top_logprobs_num"], "top_logprobs_num")
    _apply_logprob_flags(raw, flags, logprob_start_len)
    params = _sampling_params(raw, vocab_size)
    generate_request = GenerateRequest(params, stream=stream, rid=rid, **prompt)
    return NativeRequest(generate_request, max(logprob_start_len, 0), flags.get("return_text_in_logprobs", False))


def _top_level_flags(body: dict, raw: dict) -> dict[str, bool]:
    """The log-probability switches sent at the top level, where they override ``sampling_params``' own."""
    for name in ("return_logprob", "return_prompt_logprob"):
        # Checked before a top-level flag may override it: a bad value is refused wherever it stands.
        if name in raw and not isinstance(raw[name], bool):
            raise RequestError(f"{name} must be true or false, got {shown(raw[name])}", f"sampling_params.{name}")
    return {name: parse_flag(body, name) for name in TOP_LEVEL_FLAGS if body.get(name) is not None}


def _apply_logprob_flags(raw: dict, flags: dict[str, bool], logprob_start_len: int) -> None:
    if "return_logprob" in flags:
        raw["return_logprob"] = flags["return_logprob"]
    if "return_prompt_logprob" in flags:
        raw["return_prompt_logprob"] = flags["return_prompt_logprob"]
    elif raw.get("return_logprob") and logprob_start_len >= 0:
        raw["return_prompt_logprob"] = True  # SGLang's way to ask for the prompt's log-probabilities


def _parse_prompt(body: dict, vocab_size: int | None) -> dict:
    """``text`` or ``input_ids`` as :class:`GenerateRequest` fields; a list of
    strings or of token-id lists is a batch, as in SGLang."""
    # A null text or input_ids is one not sent, as for every optional field.
    text, input_ids = body.get("text"), body.get("input_ids")
    if (text is None) == (input_ids is None):
        raise RequestError("send exactly one of text and input_ids", "text")
    if text is not None:
        return _parse_text(text)
    return _parse_input_ids(input_ids, vocab_size)


def _parse_text(text) -> dict:
    if isinstance(text, str):
        check_text(text, "text")
        return {"text": text}
    if not isinstance(text, list) or not text or not all(isinstance(item, str) for item in text):
        raise RequestError("text must be a string or a non-empty list of strings", "text")
    check_texts(text, "text")
    return {"prompts": list(text), "prompt_field": "text"}


def _parse_input_ids(input_ids, vocab_size: int | None) -> dict:
    if isinstance(input_ids, list) and input_ids and all(isinstance(ids, list) for ids in input_ids):
        batch = [list(parse_token_ids(ids, f"input_ids[{i}]", vocab_size)) for i, ids in enumerate(input_ids)]
        return {"prompts": batch, "prompt_field": "input_ids"}
    return {"input_ids": parse_token_ids(input_ids, "input_ids", vocab_size)}


def _sampling_params_object(raw) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RequestError("sampling_params must be an object", "sampling_params")
    for key in raw:
        if key not in SAMPLING_PARAM_NAMES:
            raise RequestError(
                f"unknown sampling_params key {shown(key)}; known keys: {', '.join(SAMPLING_PARAM_NAMES)}",
                f"sampling_params.{key}",  # the error response escapes what UTF-8 cannot encode
            )
    return {key: value for key, value in raw.items() if value is not None}


def _sampling_params(raw: dict, vocab_size: int | None) -> SamplingParams:
    try:
        if "stop" in raw:
            raw["stop"] = parse_stop(raw["stop"])
        if "logit_bias" in raw:
            raw["logit_bias"] = parse_logit_bias(raw["logit_bias"])
        if "json_schema" in raw:
            raw["json_schema"] = parse_native_json_schema(raw["json_schema"], "json_schema")
        return checked_sampling_params(raw, vocab_size, NATIVE_PARAM_NAMES)
    except RequestError as error:
        raise RequestError(error.message, f"sampling_params.{error.param}", error.status_code) from None
