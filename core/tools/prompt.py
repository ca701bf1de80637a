"""A conversation with tools, made ready for the model's chat template.

A template that reads ``tools`` (Hermes, Qwen, Llama 3.1 and others) gets the
tools, the assistant turns' ``tool_calls`` and the ``tool`` turns as they
are, with each call's arguments decoded to an object, as templates written
for Hugging Face's ``apply_chat_template`` expect.

A template that does not (SmolLM2's, for one) would drop them, so the
tool-call parser writes them as text instead, in the format it parses:

- the tools go into the system message (one is added if the conversation has none),
- each assistant turn's calls are appended to its content,
- each run of ``tool`` turns becomes one user turn holding the results in order.
"""

from __future__ import annotations

import json

from tercet.tools.tool_calls import ToolCall, ToolCallParser


def prepare_conversation(
    messages: list[dict], tools: list[dict] | None, template_renders_tools: bool, parser: ToolCallParser
) -> tuple[list[dict], list[dict] | None]:
    """``(messages, tools)`` to render: tools is None when the template is not to see them."""
    uses_tools = bool(tools) or any(m.get("tool_calls") or m["role"] == "tool" for m in messages)
    if not uses_tools:
        return messages, None
    if template_renders_tools:
        return [_with_decoded_arguments(message) for message in messages], (list(tools) if tools else None)
    return _written_out(messages, tools, parser), None


def _with_decoded_arguments(message: dict) -> dict:
    if not message.get("tool_calls"):
        return message
    calls = []
    for call in message["tool_calls"]:
        function = dict(call["function"])
        try:
            function["arguments"] = json.loads(function["arguments"])
        except ValueError:
            pass  # not JSON: the template gets the text as sent
        calls.append({**call, "function": function})
    return {**message, "tool_calls": calls}


def _written_out(messages: list[dict], tools: list[dict] | None, parser: ToolCallParser) -> list[dict]:
    written: list[dict] = []
    for message in messages:
        _write(message, written, parser)
    if tools:
        offer = parser.tools_prompt(list(tools))
        if written[0]["role"] == "system":
            written[0] = {"role": "system", "content": f"{written[0]['content']}\n\n{offer}"}
        else:
            written.insert(0, {"role": "system", "content": offer})
    return [{"role": m["role"], "content": m["content"]} for m in written]


def _write(message: dict, written: list[dict], parser: ToolCallParser) -> None:
    """Append ``message`` as plain text turns: tool results join into one user turn per run."""
    if message["role"] == "tool":
        result = parser.result_text(message["content"])
        if written and written[-1].get("is_tool_results"):
            written[-1]["content"] += "\n" + result
        else:
            written.append({"role": "user", "content": result, "is_tool_results": True})
    elif message.get("tool_calls"):
        calls = [ToolCall(call["function"]["name"], call["function"]["arguments"]) for call in message["tool_calls"]]
        content = "\n".join(part for part in (message["content"], parser.calls_text(calls)) if part)
        written.append({"role": "assistant", "content": content})
    else:
        written.append({"role": message["role"], "content": message["content"]})
