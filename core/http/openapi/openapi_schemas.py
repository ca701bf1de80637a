"""The schemas of ``GET /openapi.json``: request bodies, errors, and the helpers that build them.

Every range comes from the limits the parsers enforce (the ranges of
:data:`tercet.sampling_params.FIELD_RANGES` and the parsers' own constants),
so the document and the server cannot disagree. :mod:`tercet.http.openapi.openapi_document`
puts them into the document.
"""

from __future__ import annotations

from tercet.config import ServerConfig
from tercet.field_checks import IntRange, NumberRange
from tercet.http.native.native_request import LOGPROB_START_LEN
from tercet.http.openai.chat_messages import CHAT_ROLES
from tercet.http.openai.openai_request import OUTPUT_MODALITIES, UNSUPPORTED_CHAT_FIELDS
from tercet.http.openai.tool_request import FUNCTION_NAME_PATTERN, TOOL_CHOICE_MODES
from tercet.http.scheduling_fields import MAX_TENANT_LENGTH, PRIORITY
from tercet.http.structured_output import SCHEMA_NAME_PATTERN
from tercet.sampling_params import FIELD_RANGES, MAX_STOP_STRINGS, TOKEN_ID

ERROR_REF = {"$ref": "#/components/schemas/Error"}
# The longest prompt list with the default configuration; the served document has the server's own.
DEFAULT_MAX_PROMPTS = ServerConfig.max_prompts_per_request
# Fields whose maximum build_document(max_tokens_limit=...) lowers.
TOKEN_COUNT_FIELDS = ("max_new_tokens", "min_new_tokens")


# -- schema helpers -------------------------------------------------------------


def ranged(
    value_range: IntRange | NumberRange, vocab_size: int | None = None, cap: int | None = None, **extra
) -> dict:
    """The schema of a parser's range; ``cap`` lowers its maximum."""
    if isinstance(value_range, IntRange):
        schema = {"type": "integer", "minimum": value_range.minimum, "maximum": value_range.maximum_for(vocab_size)}
    else:
        schema = {"type": "number", "minimum": value_range.minimum, "maximum": value_range.maximum}
        if value_range.exclusive_minimum:
            schema["exclusiveMinimum"] = True  # OpenAPI 3.0 spelling: a flag on minimum
    if cap is not None:
        schema["maximum"] = min(schema["maximum"], cap)
    return {**schema, **extra}


def nullable(schema: dict) -> dict:
    # A JSON null means "the default" on every optional field.
    return {**schema, "nullable": True}


def object_schema(properties: dict, required: tuple[str, ...] = (), additional: bool = True, **extra) -> dict:
    schema = {"type": "object", "properties": properties, **extra}
    if required:
        schema["required"] = list(required)
    if not additional:
        schema["additionalProperties"] = False
    return schema


def token_ids_schema(vocab_size: int | None, min_items: int = 0) -> dict:
    token_id = ranged(TOKEN_ID, vocab_size, description="a token id, below the vocabulary size")
    schema = {"type": "array", "items": token_id}
    if min_items:
        schema["minItems"] = min_items
    return schema


def _prompt_list(prompt: dict, max_prompts: int) -> dict:
    """A batch of prompts; prompts × n is bounded too, which a schema cannot say."""
    description = f"a batch: at most {max_prompts} prompts, and prompts × n at most {max_prompts} completions"
    return {"type": "array", "minItems": 1, "maxItems": max_prompts, "items": prompt, "description": description}


# -- the sampling parameters (docs/api.md "Sampling parameters") ---------------


def _stop() -> dict:
    text = {"type": "string", "minLength": 1}
    return {"oneOf": [text, {"type": "array", "items": text, "maxItems": MAX_STOP_STRINGS}]}


def _logit_bias() -> dict:
    return {
        "type": "object",
        "description": "token id (a string of digits) -> bias added to its logit",
        "additionalProperties": ranged(FIELD_RANGES["logit_bias"]),
    }


def _constraint(description: str) -> dict:
    # Only the shape: the grammar backend may still refuse what it cannot compile (a 400).
    return {"type": "string", "minLength": 1, "description": f"{description}; at most one output constraint"}


def _response_format() -> dict:
    """OpenAI's ``response_format``: each ``type`` is a branch, so a branch's fields are checked only for it."""

    def branch(kind: str, **properties) -> dict:
        required = ("type", *properties)
        return object_schema({"type": {"type": "string", "enum": [kind]}, **properties}, required=required)

    json_schema = object_schema(
        {
            "name": {"type": "string", "pattern": SCHEMA_NAME_PATTERN},
            "description": nullable({"type": "string"}),
            # A JSON Schema is an object or a boolean.
            "schema": nullable({
                "oneOf": [{"type": "object"}, {"type": "boolean"}],
                "description": "a JSON Schema; left out: any JSON object",
            }),
            "strict": nullable({"type": "boolean", "description": "the schema is always enforced"}),
        },
        required=("name",),
    )
    return {
        "oneOf": [branch("text"), branch("json_object"), branch("json_schema", json_schema=json_schema)],
        "description": "the output's format: plain text, any JSON object, or JSON matching a schema",
    }


def _sampling_fields(max_tokens_limit: int | None, vocab_size: int | None) -> dict:
    """The fields shared by every route, by their ``/generate`` names (tercet's own)."""

    def sampling_field(name: str, **extra) -> dict:
        cap = max_tokens_limit if name in TOKEN_COUNT_FIELDS else None
        return ranged(FIELD_RANGES[name], vocab_size, cap, **extra)

    return {
        "max_new_tokens": sampling_field("max_new_tokens"),
        "min_new_tokens": sampling_field("min_new_tokens", description="at most max tokens"),
        "temperature": sampling_field("temperature", description="0: greedy"),
        "top_p": sampling_field("top_p"),
        "top_k": sampling_field("top_k", description="-1 or 0: no top-k filtering; at most the vocabulary size"),
        "min_p": sampling_field("min_p"),
        "frequency_penalty": sampling_field("frequency_penalty"),
        "presence_penalty": sampling_field("presence_penalty"),
        "repetition_penalty": sampling_field("repetition_penalty"),
        "seed": sampling_field("seed"),
        "stop": _stop(),
        "stop_token_ids": token_ids_schema(vocab_size),
        "ignore_eos": {"type": "boolean"},
        "skip_special_tokens": {"type": "boolean"},
        "no_stop_trim": {"type": "boolean"},
        "speculative": {"type": "boolean", "description": "false: no speculative drafts for this request"},
        "logit_bias": _logit_bias(),
        "n": sampling_field("n"),
        "regex": _constraint("a regular expression the whole output matches"),
        "ebnf": _constraint("an EBNF (GBNF) grammar the output matches"),
    }


# The OpenAI routes' names for the sampling fields whose names differ.
OPENAI_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens"}


def _openai_sampling_fields(max_tokens_limit: int | None, vocab_size: int | None) -> dict:
    fields = _sampling_fields(max_tokens_limit, vocab_size)
    return {OPENAI_NAMES.get(name, name): nullable(schema) for name, schema in fields.items()}


def _scheduling_fields() -> dict:
    return {
        "priority": nullable(ranged(PRIORITY, description="for the priority scheduling policy")),
        "user": nullable({"type": "string", "maxLength": MAX_TENANT_LENGTH, "description": "the tenant"}),
    }


def _stream_fields() -> dict:
    return {
        "stream": nullable({"type": "boolean"}),
        "stream_options": nullable(
            object_schema(
                {"include_usage": nullable({"type": "boolean"})},
                description="ignored unless stream is true",
            )
        ),
    }


def _top_logprobs() -> dict:
    return ranged(FIELD_RANGES["top_logprobs_num"])


# -- request bodies -----------------------------------------------------------------


def generate_request(
    max_tokens_limit: int | None = None, vocab_size: int | None = None, max_prompts: int = DEFAULT_MAX_PROMPTS
) -> dict:
    sampling = {name: nullable(schema) for name, schema in _sampling_fields(max_tokens_limit, vocab_size).items()}
    sampling.update({
        "return_logprob": nullable({"type": "boolean"}),
        "top_logprobs_num": nullable(_top_logprobs()),
        "return_prompt_logprob": nullable({"type": "boolean"}),
        "json_schema": nullable({
            "oneOf": [{"type": "string", "minLength": 1}, {"type": "object"}],
            "description": "a JSON Schema as JSON text (or as an object); at most one output constraint",
        }),
    })
    one_text, one_prompt = {"type": "string"}, token_ids_schema(vocab_size, min_items=1)
    text = {
        "oneOf": [one_text, _prompt_list(one_text, max_prompts)],
        "description": "the prompt, or a list of them; exactly one of text and input_ids is not null",
    }
    input_ids = {"oneOf": [one_prompt, _prompt_list(one_prompt, max_prompts)]}
    properties = {
        "text": nullable(text),
        "input_ids": nullable(input_ids),
        "sampling_params": nullable(object_schema(sampling, additional=False)),
        "stream": nullable({"type": "boolean"}),
        "rid": nullable({"type": "string", "minLength": 1, "description": "must not be in use"}),
        "return_logprob": nullable({"type": "boolean"}),
        "top_logprobs_num": nullable(_top_logprobs()),
        "return_prompt_logprob": nullable({"type": "boolean"}),
        "logprob_start_len": nullable(ranged(LOGPROB_START_LEN)),
        "return_text_in_logprobs": nullable({"type": "boolean"}),
        "lora_name": nullable({"type": "string", "minLength": 1, "description": "a loaded LoRA adapter (404 if none)"}),
        "lora_path": nullable({"type": "string", "minLength": 1, "description": "SGLang's name for lora_name"}),
        **_scheduling_fields(),
    }
    # Exactly one of them not null: each branch holds one, non-nullable.
    one_of = [object_schema({"text": text}, required=("text",)), object_schema({"input_ids": input_ids}, required=("input_ids",))]
    return object_schema(properties, oneOf=one_of)


def completion_request(
    max_tokens_limit: int | None = None, vocab_size: int | None = None, max_prompts: int = DEFAULT_MAX_PROMPTS
) -> dict:
    text, token_ids = {"type": "string"}, token_ids_schema(vocab_size, min_items=1)
    # A one-element list is that prompt alone; longer lists are batches.
    prompt = {"oneOf": [text, token_ids, _prompt_list(text, max_prompts), _prompt_list(token_ids, max_prompts)]}
    properties = {
        "prompt": prompt,
        "model": nullable({"type": "string", "description": "must be the served model's name"}),
        **_openai_sampling_fields(max_tokens_limit, vocab_size),
        "logprobs": nullable(_top_logprobs()),
        "echo": nullable({"type": "boolean"}),
        "best_of": nullable(ranged(FIELD_RANGES["n"], description="only equal to n")),
        "suffix": nullable({"type": "string", "maxLength": 0, "description": "not supported"}),
        "response_format": nullable(_response_format()),
        **_stream_fields(),
        **_scheduling_fields(),
    }
    return object_schema(properties, required=("prompt",))


def _chat_message() -> dict:
    text_part = object_schema(
        {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}, required=("type", "text")
    )
    content = {"oneOf": [{"type": "string"}, {"type": "array", "items": text_part}]}
    # As OpenAI: only an assistant turn (one that called tools, there) may have no content.
    other_roles = [role for role in (*CHAT_ROLES, "developer") if role not in ("assistant", "tool")]
    speaking = object_schema(
        {"role": {"type": "string", "enum": other_roles}, "content": content}, required=("role", "content")
    )
    non_empty = {"type": "string", "minLength": 1}
    tool_result = object_schema(
        {"role": {"type": "string", "enum": ["tool"]}, "content": content, "tool_call_id": non_empty},
        required=("role", "content", "tool_call_id"),
    )
    call = object_schema(
        {
            "id": non_empty,
            "type": {"type": "string", "enum": ["function"]},
            "function": object_schema(
                {"name": non_empty, "arguments": {"type": "string", "description": "JSON text"}}, required=("name",)
            ),
        },
        required=("id", "function"),
    )
    assistant = object_schema(
        {
            "role": {"type": "string", "enum": ["assistant"]},
            "content": nullable(content),
            "tool_calls": nullable({"type": "array", "items": call}),
        },
        required=("role",),
    )
    return {
        "oneOf": [speaking, tool_result, assistant],
        "description": "content may be left out or null only on an assistant turn",
    }


def _tool_fields() -> dict:
    function = object_schema(
        {
            "name": {"type": "string", "pattern": FUNCTION_NAME_PATTERN},
            "description": nullable({"type": "string"}),
            "parameters": nullable({"type": "object", "description": "a JSON Schema of the arguments object"}),
            "strict": nullable({"type": "boolean"}),
        },
        required=("name",),
    )
    tool = object_schema({"type": {"type": "string", "enum": ["function"]}, "function": function},
                         required=("type", "function"))
    named = object_schema(
        {
            "type": {"type": "string", "enum": ["function"]},
            "function": object_schema({"name": {"type": "string"}}, required=("name",)),
        },
        required=("type", "function"),
    )
    return {
        "tools": nullable({"type": "array", "items": tool}),
        "tool_choice": nullable({
            "oneOf": [{"type": "string", "enum": list(TOOL_CHOICE_MODES)}, named],
            "description": "a named function must be one of the tools",
        }),
        "parallel_tool_calls": nullable({"type": "boolean"}),
        "functions": {"description": "not supported: send tools", "nullable": True},
        "function_call": {"description": "not supported: send tool_choice", "nullable": True},
    }


def chat_completion_request(max_tokens_limit: int | None = None, vocab_size: int | None = None) -> dict:
    sampling = _openai_sampling_fields(max_tokens_limit, vocab_size)
    properties = {
        "messages": {"type": "array", "minItems": 1, "items": _chat_message()},
        "model": nullable({"type": "string", "description": "must be the served model's name"}),
        **sampling,
        "max_completion_tokens": sampling["max_tokens"],
        "logprobs": nullable({"type": "boolean"}),
        "top_logprobs": nullable({**_top_logprobs(), "description": "needs logprobs: true"}),
        "response_format": nullable(_response_format()),
        "separate_reasoning": nullable({"type": "boolean", "description": "false: the reasoning stays in content"}),
        "modalities": nullable({"type": "array", "items": {"type": "string", "enum": list(OUTPUT_MODALITIES)}}),
        **_tool_fields(),
        **_stream_fields(),
        **_scheduling_fields(),
    }
    for name, reason in UNSUPPORTED_CHAT_FIELDS.items():
        if name not in properties:
            properties[name] = {"description": f"not supported: {reason}", "nullable": True}
    return object_schema(properties, required=("messages",))


# -- responses ------------------------------------------------------------------


def model_schema() -> dict:
    """One model, as ``GET /v1/models/{model}`` returns it and ``GET /v1/models`` lists it."""
    return object_schema(
        {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["model"]},
            # Bounded, as every integer of the document is (tests check it fits 64 bits).
            "created": {
                "type": "integer", "minimum": 0, "maximum": (1 << 63) - 1,
                "description": "when the server started, in Unix seconds",
            },
            "owned_by": {"type": "string"},
        },
        required=("id", "object", "created", "owned_by"),
    )


def error_schema() -> dict:
    detail = object_schema(
        {
            "message": {"type": "string"},
            "type": {"type": "string"},
            "param": {"type": "string", "nullable": True},
            "code": {"type": "string", "nullable": True},
        },
        required=("message", "type", "param", "code"),
    )
    return object_schema({"error": detail}, required=("error",))
