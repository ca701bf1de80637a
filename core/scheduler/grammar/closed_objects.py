"""Closed JSON objects: an object schema that lists its properties allows no others.

JSON Schema lets an object hold any key it does not declare unless it says
``"additionalProperties": false``. Clients mean the opposite: OpenAI's strict
schemas require it, and tools such as ``llm --schema`` send
``{"properties": {...}}`` expecting exactly those keys. Left open, a small model
adds keys of its own (a ``"description"``) and may never stop. So, unless
``[grammar] allow_extra_properties`` is set, every object schema that lists
``properties`` and says nothing of ``additionalProperties``,
``patternProperties`` or ``unevaluatedProperties`` gets
``"additionalProperties": false`` before it is compiled. A schema that
combines objects with ``allOf`` is left as it is (closing each part would
refuse the other parts' keys), and so is an object without ``properties``
(``{"type": "object"}``, JSON mode: any object).
"""

from __future__ import annotations

import json

from tercet.scheduler.grammar.grammar_backend import GrammarError

# Keywords whose value is a schema, a list of schemas, or a map of names to schemas.
ONE_SCHEMA = ("items", "additionalItems", "contains", "not", "if", "then", "else", "additionalProperties",
              "propertyNames", "unevaluatedItems", "unevaluatedProperties")
SCHEMA_LISTS = ("prefixItems", "anyOf", "oneOf", "items")
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# Any of these on a schema says what other keys it takes: it is left as it is.
OPEN_KEYWORDS = ("additionalProperties", "patternProperties", "unevaluatedProperties", "allOf")


def closed_objects(schema_text: str) -> str:
    """``schema_text`` with its object schemas closed; as it is when it is not JSON
    (the backend then says why it cannot compile it)."""
    try:
        schema = json.loads(schema_text)
        closed = _closed(schema)
    except ValueError:
        return schema_text
    except RecursionError:
        raise GrammarError("the JSON Schema is nested too deeply to be read") from None
    return schema_text if closed == schema else json.dumps(closed, ensure_ascii=False)


def _closed(schema):
    if not isinstance(schema, dict):
        return schema
    closed = {keyword: _closed_value(keyword, value) for keyword, value in schema.items()}
    if _is_open_object(schema):
        closed["additionalProperties"] = False
    return closed


def _closed_value(keyword: str, value):
    transform = TRANSFORMS.get(keyword)
    return value if transform is None else transform(value)


def _each(value):
    """A schema, or a list of schemas (``items`` may be either)."""
    return [_closed(item) for item in value] if isinstance(value, list) else _closed(value)


def _each_named(value):
    return {name: _closed(item) for name, item in value.items()} if isinstance(value, dict) else value


def _all_of(value):
    # The parts' nested schemas are closed; the parts themselves are not.
    return [_unclosed_part(_closed(part), part) for part in value] if isinstance(value, list) else value


def _is_open_object(schema: dict) -> bool:
    return isinstance(schema.get("properties"), dict) and not any(keyword in schema for keyword in OPEN_KEYWORDS)


def _unclosed_part(closed, part):
    if isinstance(part, dict) and _is_open_object(part):
        return {keyword: value for keyword, value in closed.items() if keyword != "additionalProperties"}
    return closed


TRANSFORMS = {**dict.fromkeys(ONE_SCHEMA + SCHEMA_LISTS, _each), **dict.fromkeys(SCHEMA_MAPS, _each_named),
              "allOf": _all_of}
