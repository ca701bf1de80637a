"""The OpenAI Responses API's options that a response repeats: ``text``, ``metadata``, ``reasoning``, ``tools``.

Each is checked in the Responses API's own shape and normalised to what the
Response object allows, since the answer repeats it: ``metadata`` is at most 16
string keys (64 characters) to string values (512), as OpenAI's is; ``text`` is
``{"format": {...}}`` with the format in full (a null format is plain text); and
``reasoning`` is repeated as sent (tercet reads no effort from it: a model
reasons as its reasoning parser lets it). ``text.format`` and ``tools`` also
become chat completions' ``response_format`` and function tools.
"""

from __future__ import annotations

from tercet.errors import RequestError
from tercet.field_checks import check_text, shown
from tercet.http.chat.protocol_fields import (
    checked_choice,
    checked_flag,
    checked_object,
    checked_schema,
    checked_string,
    checked_tool_name,
    optional_string,
)
from tercet.http.structured_output import SCHEMA_NAME

TEXT_FORMATS = ("text", "json_object", "json_schema")
VERBOSITIES = ("low", "medium", "high")
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
SUMMARIES = ("auto", "concise", "detailed")
# OpenAI's bounds on metadata.
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512
PLAIN_TEXT = {"format": {"type": "text"}}


def metadata(value) -> dict:
    """``metadata``: at most 16 pairs of a string key (at most 64 characters) and a string value (512)."""
    if value is None:
        return {}
    shape = f"an object of at most {MAX_METADATA_PAIRS} string keys to string values"
    checked_object(value, "metadata", shape)
    if len(value) > MAX_METADATA_PAIRS:
        raise RequestError(f"metadata must be {shape}; it has {len(value)}", "metadata")
    for key, text in value.items():
        check_text(key, "metadata")
        if len(key) > MAX_METADATA_KEY:
            raise RequestError(f"metadata keys are at most {MAX_METADATA_KEY} characters; {shown(key)} is longer",
                               "metadata")
        where = f"metadata.{key}"
        if not isinstance(text, str) or len(text) > MAX_METADATA_VALUE:
            raise RequestError(f"{where} must be a string of at most {MAX_METADATA_VALUE} characters, "
                               f"got {shown(text)}", where)
        check_text(text, where)
    return dict(value)


def reasoning(value) -> dict | None:
    """``reasoning``, repeated as sent: ``{"effort", "summary"}``, each one of OpenAI's values or null."""
    if value is None:
        return None
    checked_object(value, "reasoning", 'an object such as {"effort": "low"}')
    effort, summary = value.get("effort"), value.get("summary")
    return {"effort": None if effort is None else checked_choice(effort, "reasoning.effort", EFFORTS),
            "summary": None if summary is None else checked_choice(summary, "reasoning.summary", SUMMARIES)}


def text_options(value) -> tuple[dict, dict | None]:
    """``(text as a response repeats it, chat completions' response_format or None)``."""
    if value is None:
        return PLAIN_TEXT, None
    checked_object(value, "text", 'an object such as {"format": {"type": "text"}}')
    text_format = _text_format(value.get("format"))
    echoed = {"format": text_format}
    if value.get("verbosity") is not None:
        echoed["verbosity"] = checked_choice(value["verbosity"], "text.verbosity", VERBOSITIES)
    return echoed, _response_format(text_format)


def _text_format(value) -> dict:
    if value is None:
        return PLAIN_TEXT["format"]
    checked_object(value, "text.format", "an object with a type")
    kind = checked_choice(value.get("type"), "text.format.type", TEXT_FORMATS)
    if kind != "json_schema":
        return {"type": kind}
    name = value.get("name")
    if not isinstance(name, str) or not SCHEMA_NAME.fullmatch(name):
        raise RequestError("text.format.name must be 1 to 64 letters, digits, underscores and dashes, "
                           f"got {shown(name)}", "text.format.name")
    if value.get("schema") is None:
        raise RequestError("text.format.schema is required when text.format.type is 'json_schema'",
                           "text.format.schema")
    text_format = {"type": "json_schema", "name": name, "schema": checked_schema(value["schema"], "text.format.schema"),
                   "strict": bool(checked_flag(value.get("strict"), "text.format.strict"))}
    description = optional_string(value.get("description"), "text.format.description")
    if description is not None:
        text_format["description"] = description
    return text_format


def _response_format(text_format: dict) -> dict | None:
    if text_format["type"] == "text":
        return None
    if text_format["type"] == "json_object":
        return {"type": "json_object"}
    # Responses flatten what chat completions nest under "json_schema".
    return {"type": "json_schema", "json_schema": {key: value for key, value in text_format.items() if key != "type"}}


def function_tools(value) -> list[dict]:
    """``tools``: function tools, each ``{"type": "function", "name", "description", "parameters", "strict"}``."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise RequestError(f"tools must be a list of function tools, got {shown(value)}", "tools")
    tools, names = [], set()
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else tool
            raise RequestError(f"{where}: tools of type {shown(kind)} are not supported here; define function tools",
                               f"{where}.type")
        parameters = tool.get("parameters")
        tools.append({
            "type": "function", "name": checked_tool_name(tool.get("name"), f"{where}.name", names),
            "description": optional_string(tool.get("description"), f"{where}.description"),
            "parameters": None if parameters is None else checked_schema(parameters, f"{where}.parameters"),
            "strict": checked_flag(tool.get("strict"), f"{where}.strict"),
        })
    return tools


def chat_tool(tool: dict) -> dict:
    """A checked function tool as chat completions' ``{"type": "function", "function": {...}}``."""
    function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if tool[key] is not None}
    return {"type": "function", "function": function}


def tool_choice(value, names: list[str]) -> str | dict | None:
    """``tool_choice``, checked against the tools: ``"auto"``, ``"none"``, ``"required"`` or a named function
    (None when left out)."""
    if value is None:
        return None
    shape = '"auto", "none", "required" or {"type": "function", "name": ...}'
    if isinstance(value, str) and value in ("auto", "none", "required"):
        if value == "required" and not names:
            raise RequestError('tool_choice "required" needs tools to call; the request sends none', "tool_choice")
        return value
    if not isinstance(value, dict) or value.get("type") != "function":
        raise RequestError(f"tool_choice must be {shape}; got {shown(value)}", "tool_choice")
    name = checked_string(value.get("name"), "tool_choice.name")
    if name not in names:
        offered = ", ".join(map(repr, names)) if names else "the request sends none"
        raise RequestError(f"tool_choice.name {name!r} is not one of the tools ({offered})", "tool_choice.name")
    return {"type": "function", "name": name}
