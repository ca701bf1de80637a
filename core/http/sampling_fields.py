"""OpenAI request fields -> :class:`SamplingParams`, shared by completions and chat.

Besides OpenAI's own fields, the extensions vLLM and SGLang accept on these
routes (``top_k``, ``min_p``, ``repetition_penalty``, ``min_tokens``,
``stop_token_ids``, ``ignore_eos``, ``skip_special_tokens``, ``no_stop_trim``,
and SGLang's output constraints ``regex`` and ``ebnf``) are taken too, so their
clients work unchanged, as is tercet's own ``speculative`` (false: no drafts). ``response_format`` is read by
:mod:`tercet.http.structured_output`. A JSON ``null`` means "the default".
The field parsers below, and :func:`checked_sampling_params`, the one place a
request's :class:`SamplingParams` is built and validated, are shared with
``/generate`` (:mod:`tercet.http.native.native_request`).
"""

from __future__ import annotations

import re

from tercet.errors import RequestError
from tercet.field_checks import is_integer, shown
from tercet.http.structured_output import parse_response_format
from tercet.reasoning.parser import ReasoningFrame
from tercet.sampling_params import FIELD_RANGES, TOKEN_ID, SamplingParams

# OpenAI field -> SamplingParams field, passed through as sent (validate checks them).
DIRECT_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "repetition_penalty": "repetition_penalty",
    "seed": "seed",
    "min_tokens": "min_new_tokens",
    "stop_token_ids": "stop_token_ids",
    "ignore_eos": "ignore_eos",
    "skip_special_tokens": "skip_special_tokens",
    "no_stop_trim": "no_stop_trim",
    "speculative": "speculative",
    "n": "n",
    "regex": "regex",
    "ebnf": "ebnf",
}
# ASCII digits only (\d would take any script's), and few enough that int() is
# quick and within Python's digit limit: past 20 no value is a token id anyway.
INTEGER_STRING = re.compile(r"\s*-?[0-9]{1,20}\s*")


def sampling_params_from_body(
    body: dict,
    *,
    max_tokens_key: str,
    max_new_tokens: int,
    return_logprob: bool = False,
    top_logprobs_num: int = 0,
    return_prompt_logprob: bool = False,
    vocab_size: int | None = None,
    param_names: dict[str, str] | None = None,
    forced_schema: str | None = None,
    reasoning_frame: ReasoningFrame | None = None,
) -> SamplingParams:
    """The request's sampling parameters, validated (:func:`checked_sampling_params`).

    The route has already worked out the max tokens (``max_tokens_key`` names
    the field it came from, for errors) and the log-probability switches.
    ``param_names`` renames validation errors' params to this route's fields.
    ``forced_schema`` is a JSON Schema the route imposes (a forced tool call),
    which ``response_format`` then may not (:mod:`tercet.http.openai.tool_request`).
    ``reasoning_frame`` (a chat that separates reasoning) puts the JSON Schema
    after the model's reasoning; ``regex`` and ``ebnf`` describe the whole output,
    reasoning included, and are left as they are.
    """
    values = {target: body[source] for source, target in DIRECT_FIELDS.items() if body.get(source) is not None}
    fields = dict(
        max_new_tokens=max_new_tokens,
        stop=parse_stop(body.get("stop")),
        logit_bias=parse_logit_bias(body.get("logit_bias")),
        return_logprob=return_logprob,
        top_logprobs_num=top_logprobs_num,
        return_prompt_logprob=return_prompt_logprob,
        json_schema=forced_schema or parse_response_format(body.get("response_format")),
        **values,
    )
    if fields["json_schema"] is not None and reasoning_frame is not None:
        fields.update(reasoning_start=reasoning_frame.start, reasoning_end=reasoning_frame.end)
    renames = {"max_tokens": max_tokens_key, **(param_names or {})}
    return checked_sampling_params(fields, vocab_size, renames)


def checked_sampling_params(fields: dict, vocab_size: int | None, renames: dict[str, str]) -> SamplingParams:
    """:class:`SamplingParams` of ``fields``, validated against :data:`FIELD_RANGES` and
    the served vocabulary: the one validation a request's parameters get. The
    TokenizerManager trusts what comes out. ``renames`` maps the params that
    :meth:`SamplingParams.validate` names onto the route's own fields."""
    params = SamplingParams(**fields)
    try:
        params.validate(vocab_size)
    except RequestError as error:
        raise renamed(error, renames) from None
    return params


def parse_stop(stop) -> list[str]:
    """``stop``: a string or a list of strings (validate checks what is in the list)."""
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list):
        return list(stop)
    raise RequestError(f"stop must be a string or a list of strings, got {shown(stop)}", "stop")


def parse_logit_bias(logit_bias) -> dict[int, float]:
    """OpenAI sends ``{"<token id>": bias}``: JSON object keys are always strings."""
    if logit_bias is None:
        return {}
    if not isinstance(logit_bias, dict):
        raise RequestError("logit_bias must be an object mapping token ids to biases", "logit_bias")
    parsed = {}
    for key, bias in logit_bias.items():
        if isinstance(key, str) and INTEGER_STRING.fullmatch(key):
            parsed[int(key)] = bias
        elif is_integer(key):
            parsed[key] = bias
        else:
            raise RequestError(f"logit_bias keys must be token ids such as \"50256\", got {shown(key)}", "logit_bias")
    return parsed


def parse_token_ids(value, name: str, vocab_size: int | None) -> list[int]:
    """A prompt given as token ids: a non-empty list of ids below the vocabulary size."""
    if not isinstance(value, list) or not value:
        raise RequestError(f"{name} must be a non-empty list of token ids", name)
    for token_id in value:
        TOKEN_ID.check(token_id, name, vocab_size, f"each token id in {name}")
    return value


def parse_flag(body: dict, key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"{key} must be true or false, got {shown(value)}", key)
    return value


def parse_top_logprobs(value, key: str) -> int:
    """A number of alternatives to report per token, 0 to MAX_TOP_LOGPROBS."""
    FIELD_RANGES["top_logprobs_num"].check(value, key)
    return value


def renamed(error: RequestError, renames: dict[str, str]) -> RequestError:
    """``error`` with its param (and that name in its message) renamed."""
    new_name = renames.get(error.param)
    if new_name is None or new_name == error.param:
        return error
    message = error.message.replace(error.param, new_name, 1)
    return type(error)(message, new_name, error.status_code)
