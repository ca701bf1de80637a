import json

import pytest

from tercet.errors import RequestError
from tercet.http.openai.tool_request import parse_tool_request

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}


def test_no_tools_is_no_tool_request():
    assert parse_tool_request({}) is None
    assert parse_tool_request({"tools": [], "tool_choice": "auto"}) is None
    assert parse_tool_request({"tool_choice": "none"}) is None


def test_choices():
    auto = parse_tool_request({"tools": [WEATHER]})
    assert auto.choice == "auto" and auto.parses_calls and not auto.is_forced and auto.max_calls is None
    assert parse_tool_request({"tools": [WEATHER], "parallel_tool_calls": False}).max_calls == 1
    none = parse_tool_request({"tools": [WEATHER], "tool_choice": "none"})
    assert not none.parses_calls and not none.is_forced
    named = parse_tool_request({"tools": [WEATHER, TIME], "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
    assert named.is_forced and named.function == "get_time" and named.max_calls == 1


def test_a_forced_call_is_kept_to_the_functions_schemas():
    named = parse_tool_request({"tools": [WEATHER, TIME], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
    schema = json.loads(named.forced_call_schema())
    assert schema["properties"]["name"] == {"const": "get_weather"}
    assert schema["properties"]["arguments"] == WEATHER["function"]["parameters"]
    assert schema["required"] == ["name", "arguments"] and schema["additionalProperties"] is False
    required = json.loads(parse_tool_request({"tools": [WEATHER, TIME], "tool_choice": "required"}).forced_call_schema())
    names = [option["properties"]["name"]["const"] for option in required["anyOf"]]
    assert names == ["get_weather", "get_time"]
    # A function without parameters takes any arguments object.
    assert required["anyOf"][1]["properties"]["arguments"] == {"type": "object"}


@pytest.mark.parametrize(
    "body, param, words",
    [
        ({"tools": {"a": 1}}, "tools", "list"),
        ({"tools": ["f"]}, "tools[0]", "object"),
        ({"tools": [{"type": "code_interpreter"}]}, "tools[0].type", "'function'"),
        ({"tools": [{"type": "function"}]}, "tools[0].function", "name"),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name", "letters"),
        ({"tools": [{"type": "function", "function": {"name": "f", "description": 3}}]},
         "tools[0].function.description", "string"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "object"}}]},
         "tools[0].function.parameters", "JSON Schema"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"x": "\ud800"}}}]},
         "tools[0].function.parameters", "surrogate"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name", "twice"),
        ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice", "'required'"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
         "tool_choice.function.name", "'get_weather'"),
        ({"tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice.function.name", "none"),
        ({"tool_choice": "required"}, "tool_choice", "sends none"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function"}}, "tool_choice.function.name", "name"),
        ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or false"),
        ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}},
         "tool_choice", "response_format"),
        ({"tools": [WEATHER], "tool_choice": "required", "regex": "a+"}, "tool_choice", "regex"),
        ({"functions": [{"name": "f"}]}, "functions", "tools"),
        ({"function_call": "auto"}, "function_call", "tool_choice"),
    ],
)
def test_bad_tool_fields_name_the_field(body, param, words):
    with pytest.raises(RequestError) as info:
        parse_tool_request(body)
    assert info.value.status_code == 400 and info.value.param == param
    assert words in info.value.message
