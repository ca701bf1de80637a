"""Object schemas that list their properties get no others, unless they say so."""

import json

import pytest

from tercet.scheduler.grammar.closed_objects import closed_objects
from tercet.scheduler.grammar.grammar_backend import GrammarError


def closed(schema) -> dict:
    return json.loads(closed_objects(json.dumps(schema)))


def test_an_object_listing_its_properties_is_closed_at_every_depth():
    schema = {"type": "object", "properties": {
        "name": {"type": "string"},
        "pets": {"type": "array", "items": {"type": "object", "properties": {"kind": {"type": "string"}}}},
        "home": {"anyOf": [{"type": "object", "properties": {"city": {"type": "string"}}}, {"type": "null"}]},
    }, "$defs": {"tag": {"type": "object", "properties": {"label": {"type": "string"}}}}}
    result = closed(schema)
    assert result["additionalProperties"] is False
    assert result["properties"]["pets"]["items"]["additionalProperties"] is False
    assert result["properties"]["home"]["anyOf"][0]["additionalProperties"] is False
    assert result["$defs"]["tag"]["additionalProperties"] is False
    assert "additionalProperties" not in result["properties"]["name"]


@pytest.mark.parametrize("schema", [
    {"type": "object"},  # JSON mode: any object
    {"type": "object", "properties": {"a": {}}, "additionalProperties": True},
    {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
    {"type": "object", "properties": {"a": {}}, "patternProperties": {"^x": {}}},
    {"properties": {"properties": {"type": "object"}}, "additionalProperties": True},  # a property named "properties"
    {"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]},  # closing a part would refuse the other's keys
    True,
])
def test_what_says_what_it_takes_is_left_as_it_is(schema):
    assert closed(schema) == schema


def test_text_that_is_not_json_is_left_to_the_backend():
    assert closed_objects("not json") == "not json"


def test_a_schema_too_deep_to_read_is_the_requests_error():
    depth = 5000
    with pytest.raises(GrammarError, match="nested too deeply"):
        closed_objects('{"items": ' * depth + "{}" + "}" * depth)
