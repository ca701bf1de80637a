"""Local $refs of a tool's parameters keep pointing at their $defs once the forced call's schema nests them."""

import json

import jsonschema
import pytest

from tercet.tools.request import ToolRequest
from tercet.tools.schema_refs import rebase_local_refs

# What pydantic writes for a model with a nested model and a recursive field.
ORDER_PARAMETERS = {
    "$defs": {
        "Address": {"properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object"},
        "Item": {
            "properties": {"name": {"type": "string"}, "parts": {"items": {"$ref": "#/$defs/Item"}, "type": "array"}},
            "required": ["name"], "type": "object",
        },
    },
    "properties": {
        "ship_to": {"$ref": "#/$defs/Address"},
        "items": {"items": {"$ref": "#/$defs/Item"}, "type": "array"},
        "note": {"default": {"$ref": "#/not/a/reference"}},
    },
    "required": ["ship_to", "items"],
    "type": "object",
}
TREE_PARAMETERS = {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}}
TOOLS = (
    {"type": "function", "function": {"name": "place_order", "parameters": ORDER_PARAMETERS}},
    {"type": "function", "function": {"name": "walk", "parameters": TREE_PARAMETERS}},
)
ORDER = {"ship_to": {"city": "Paris"}, "items": [{"name": "desk", "parts": [{"name": "leg"}]}]}


def test_local_pointers_are_prefixed_and_data_is_left_alone():
    rebased = rebase_local_refs(ORDER_PARAMETERS, "/properties/arguments")
    assert rebased["properties"]["ship_to"] == {"$ref": "#/properties/arguments/$defs/Address"}
    assert rebased["$defs"]["Item"]["properties"]["parts"]["items"] == {"$ref": "#/properties/arguments/$defs/Item"}
    assert rebased["properties"]["note"] == {"default": {"$ref": "#/not/a/reference"}}
    assert rebase_local_refs({"$ref": "#"}, "/anyOf/1") == {"$ref": "#/anyOf/1"}
    assert rebase_local_refs({"$ref": "other.json#/x"}, "/p") == {"$ref": "other.json#/x"}
    assert ORDER_PARAMETERS["properties"]["ship_to"] == {"$ref": "#/$defs/Address"}  # the tool's own is untouched


@pytest.mark.parametrize("choice, function", [("function", "place_order"), ("required", None)])
def test_a_forced_call_schema_resolves_the_tools_defs(choice, function):
    schema = json.loads(ToolRequest(TOOLS, choice, function).forced_call_schema())
    jsonschema.validate({"name": "place_order", "arguments": ORDER}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "place_order", "arguments": {**ORDER, "ship_to": {"town": "Paris"}}}, schema)
    if choice == "required":
        jsonschema.validate({"name": "walk", "arguments": {"children": [{"children": []}]}}, schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"name": "walk", "arguments": {"children": [{"children": 3}]}}, schema)
