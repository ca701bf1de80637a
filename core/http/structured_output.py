"""Structured output at the HTTP edge: the request fields that constrain the
output to a JSON Schema, a regular expression or a grammar, read into
:class:`SamplingParams`' ``json_schema``, ``regex`` and ``ebnf``.

- OpenAI's ``response_format`` (both OpenAI routes): ``{"type": "text"}`` is
  plain text; ``{"type": "json_object"}`` is any JSON object;
  ``{"type": "json_schema", "json_schema": {"name", "schema", "strict",
  "description"}}`` is ``schema`` (any JSON object when left out).
- SGLang's ``regex`` and ``ebnf`` (the OpenAI routes' top level, and
  ``/generate``'s ``sampling_params``) and its ``sampling_params.json_schema``
  (a schema as JSON text; the schema itself, an object, is taken too).

Only the shape is checked here: the scheduler's grammar backend compiles the
schema, expression or grammar and refuses one it cannot, with its own message.
"""

from __future__ import annotations

import json
import re

from tercet.errors import RequestError
from tercet.field_checks import check_text, shown

RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")
# What json_object asks for, and json_schema without a schema.
ANY_JSON_OBJECT = json.dumps({"type": "object"})
# OpenAI's rule for json_schema.name.
SCHEMA_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
SCHEMA_NAME_PATTERN = f"^{SCHEMA_NAME.pattern}$"


def parse_response_format(response_format) -> str | None:
    """``response_format`` -> the JSON Schema the output must match, as JSON text (None: plain text)."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise RequestError(
            f'response_format must be an object such as {{"type": "json_object"}}, got {shown(response_format)}',
            "response_format",
        )
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ANY_JSON_OBJECT
    if kind == "json_schema":
        return _json_schema_format(response_format.get("json_schema"))
    raise RequestError(
        f"response_format.type must be one of {', '.join(map(repr, RESPONSE_FORMAT_TYPES))}, got {shown(kind)}",
        "response_format.type",
    )


def _json_schema_format(json_schema) -> str:
    where = "response_format.json_schema"
    if json_schema is None:
        raise RequestError(f"{where} is required when response_format.type is 'json_schema'", where)
    if not isinstance(json_schema, dict):
        raise RequestError(f"{where} must be an object with a name and a schema, got {shown(json_schema)}", where)
    _check_schema_name(json_schema.get("name"), f"{where}.name")
    _check_schema_details(json_schema, where)
    schema = json_schema.get("schema")
    if schema is None:
        return ANY_JSON_OBJECT
    return schema_text(schema, f"{where}.schema")


def _check_schema_name(name, where: str) -> None:
    if name is None:
        raise RequestError(f"{where} is required", where)
    if not isinstance(name, str) or not SCHEMA_NAME.fullmatch(name):
        raise RequestError(f"{where} must be 1 to 64 letters, digits, underscores and dashes, got {shown(name)}", where)


def _check_schema_details(json_schema: dict, where: str) -> None:
    """``description`` and ``strict``: taken (not used), when of the right type."""
    description = json_schema.get("description")
    if description is not None and not isinstance(description, str):
        raise RequestError(f"{where}.description must be a string, got {shown(description)}", f"{where}.description")
    strict = json_schema.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise RequestError(f"{where}.strict must be true or false, got {shown(strict)}", f"{where}.strict")


def parse_native_json_schema(json_schema, param: str) -> str:
    """``/generate``'s ``json_schema``: JSON text of a schema (SGLang's form), or the schema object itself."""
    if isinstance(json_schema, dict):
        return schema_text(json_schema, param)
    if not isinstance(json_schema, str) or not json_schema:
        raise RequestError(
            f"{param} must be a JSON Schema as a non-empty string of JSON text, or as an object; "
            f"got {shown(json_schema)}",
            param,
        )
    check_text(json_schema, param)
    try:
        schema = json.loads(json_schema, parse_constant=_refuse_constant)
    except ValueError as error:
        raise RequestError(f"{param} is not valid JSON: {error}", param) from None
    except RecursionError:
        raise RequestError(f"{param} is nested too deeply to be read", param) from None
    schema_text(schema, param)  # the same checks as a schema sent as an object
    return json_schema


def schema_text(schema, param: str) -> str:
    """A schema (an object or a boolean, as JSON Schema allows) as JSON text."""
    if not isinstance(schema, (dict, bool)):
        raise RequestError(f"{param} must be a JSON Schema: an object or a boolean, got {shown(schema)}", param)
    try:
        # Without ASCII escapes, so a lone surrogate (JSON's "\ud800") is found
        # here, not by the grammar backend, which cannot take one.
        text = json.dumps(schema, ensure_ascii=False)
    except RecursionError:
        raise RequestError(f"{param} is nested too deeply to be read", param) from None
    check_text(text, param)
    return text


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a valid JSON number")
