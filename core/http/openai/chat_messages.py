"""Chat messages as OpenAI sends them -> plain dicts for the chat template.

Every message becomes ``{"role", "content": str}``; an assistant turn that
called tools keeps its ``tool_calls`` (``[{"id", "type": "function",
"function": {"name", "arguments"}}]``, arguments as JSON text), and a
``tool`` turn its ``tool_call_id``. :mod:`tercet.tools.prompt` decides how
those reach the template.
"""

from __future__ import annotations

from tercet.errors import RequestError
from tercet.field_checks import check_text, shown

CHAT_ROLES = ("system", "user", "assistant", "tool")


def parse_messages(messages) -> list[dict]:
    """Normalize chat messages for the chat template."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list of message objects", "messages")
    return [_parse_message(message, f"messages[{i}]") for i, message in enumerate(messages)]


def _parse_message(message, where: str) -> dict:
    if not isinstance(message, dict):
        raise RequestError(f"{where} must be an object with role and content", where)
    role = message.get("role")
    if role == "developer":
        role = "system"  # OpenAI's newer name for the system role
    if role not in CHAT_ROLES:
        raise RequestError(f"{where}.role must be one of {', '.join(CHAT_ROLES)}; got {shown(role)}", f"{where}.role")
    content = message.get("content")
    tool_calls = message.get("tool_calls") if role == "assistant" else None
    if content is None and role == "assistant":
        content = ""  # an assistant turn may omit content (one that only called tools does)
    parsed = {"role": role, "content": _content_text(content, f"{where}.content")}
    if tool_calls is not None:
        parsed["tool_calls"] = _tool_calls(tool_calls, f"{where}.tool_calls")
    if role == "tool":
        parsed["tool_call_id"] = _string(message.get("tool_call_id"), f"{where}.tool_call_id")
    return parsed


def _tool_calls(tool_calls, where: str) -> list[dict]:
    if not isinstance(tool_calls, list):
        raise RequestError(f"{where} must be a list of tool calls", where)
    parsed = []
    for index, call in enumerate(tool_calls):
        at = f"{where}[{index}]"
        if not isinstance(call, dict):
            raise RequestError(f'{at} must be an object {{"id", "type": "function", "function": {{...}}}}', at)
        if call.get("type", "function") != "function":
            raise RequestError(f"{at}.type must be 'function', got {shown(call.get('type'))}", f"{at}.type")
        function = call.get("function")
        if not isinstance(function, dict):
            raise RequestError(f'{at}.function must be an object {{"name", "arguments"}}', f"{at}.function")
        parsed.append({
            "id": _string(call.get("id"), f"{at}.id"),
            "type": "function",
            "function": {
                "name": _string(function.get("name"), f"{at}.function.name"),
                # Arguments are JSON text in OpenAI's API; passed on as written.
                "arguments": _string(function.get("arguments", "{}"), f"{at}.function.arguments", allow_empty=True),
            },
        })
    return parsed


def _string(value, where: str, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or not (value or allow_empty):
        raise RequestError(f"{where} must be a non-empty string, got {shown(value)}", where)
    check_text(value, where)
    return value


def _content_text(content, where: str) -> str:
    if isinstance(content, str):
        check_text(content, where)
        return content
    if content is None:
        raise RequestError(f"{where} is required (only an assistant message may leave it out or null)", where)
    if not isinstance(content, list):
        raise RequestError(f"{where} must be a string or a list of text parts", where)
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise RequestError(
                f'{where}[{j}] must be a text part {{"type": "text", "text": "..."}}; '
                "other content types are not supported",
                f"{where}[{j}]",
            )
        check_text(part["text"], f"{where}[{j}].text")
        texts.append(part["text"])
    return "\n".join(texts)
