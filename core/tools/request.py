"""What a chat request asks of tools: the tools offered, ``tool_choice`` and ``parallel_tool_calls``.

``choice`` is "none" (tools shown, answer not searched), "auto" (the parser
finds calls), "required" or "function" (a forced call, kept by the grammar
backend to :meth:`ToolRequest.forced_call_schema`). The HTTP layer parses it
from the body (:mod:`tercet.http.openai.tool_request`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tercet.tools.schema_refs import rebase_local_refs

ANY_OBJECT = {"type": "object"}


@dataclass(frozen=True)
class ToolRequest:
    # The tools as OpenAI tool objects, for the prompt.
    tools: tuple[dict, ...]
    # "none", "auto" or "required"; "function" when ``function`` is forced.
    choice: str
    function: str | None = None
    parallel_tool_calls: bool = True

    @property
    def is_forced(self) -> bool:
        return self.choice in ("required", "function")

    @property
    def parses_calls(self) -> bool:
        return self.choice != "none"

    @property
    def max_calls(self) -> int | None:
        return None if self.parallel_tool_calls and not self.is_forced else 1

    @property
    def schema_field(self) -> str:
        """The field a forced call's schema comes from: the named function's parameters, or all the tools."""
        for index, tool in enumerate(self.tools):
            if tool["function"]["name"] == self.function:
                return f"tools[{index}].function.parameters"
        return "tools"

    def forced_call_schema(self) -> str:
        """The JSON Schema of the one call a forced request answers with, as JSON text."""
        chosen = [tool for tool in self.tools if self.function is None or tool["function"]["name"] == self.function]
        if len(chosen) == 1:
            return json.dumps(_call_schema(chosen[0], ""), ensure_ascii=False)
        options = [_call_schema(tool, f"/anyOf/{index}") for index, tool in enumerate(chosen)]
        return json.dumps({"anyOf": options}, ensure_ascii=False)


def _call_schema(tool: dict, pointer: str) -> dict:
    """The schema of a call to ``tool``, placed at JSON pointer ``pointer`` of the whole schema:
    the tool's parameters move under ``properties.arguments``, and their local ``$ref``s with them."""
    parameters = tool["function"].get("parameters") or ANY_OBJECT
    return {
        "type": "object",
        "properties": {
            "name": {"const": tool["function"]["name"]},
            "arguments": rebase_local_refs(parameters, pointer + "/properties/arguments"),
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
