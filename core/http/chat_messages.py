"""Chat messages as OpenAI sends them -> ``{"role", "content": str}`` for the chat template."""

from __future__ import annotations

from tercet.errors import RequestError
from tercet.sampling_params import check_text, shown

CHAT_ROLES = ("system", "user", "assistant")


def parse_messages(messages) -> list[dict]:
    """Normalize chat messages to ``{"role", "content": str}`` for the chat template."""
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
    if content is None and role == "assistant":
        content = ""  # an assistant turn may omit content
    return {"role": role, "content": _content_text(content, f"{where}.content")}


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
