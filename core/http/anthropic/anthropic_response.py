"""Anthropic Messages API answers out: the message, its content blocks, stop reasons, usage, errors."""

from __future__ import annotations

import uuid

from tercet.http.chat.chat_blocks import REASONING, TEXT, Block
from tercet.http.chat.chat_bridge import FinishWatch
from tercet.ipc.messages import FinishKind

# Anthropic's error types by HTTP status; the SDK raises its exception by the status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def anthropic_error_body(message: str, status_code: int = 400, param: str | None = None, code: str | None = None) -> dict:
    """``{"type": "error", "error": {"type", "message"}}``: Anthropic's error shape (no field of its own for
    ``param``, so the message names it, as it does already)."""
    default = "api_error" if status_code >= 500 else "invalid_request_error"
    text = str(message).encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate stays encodable
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status_code, default), "message": text}}


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


def stop_reason(chat_finish_reason: str | None, watch: FinishWatch, stop_sequences: list[str]) -> tuple[str | None, str | None]:
    """``(stop_reason, stop_sequence)`` of a finished answer."""
    finish_reason = watch.finish_reason
    if chat_finish_reason == "tool_calls":
        return "tool_use", None
    if finish_reason is None:
        return None, None
    if finish_reason.kind is FinishKind.LENGTH:
        return "max_tokens", None
    if finish_reason.matched_text is not None and finish_reason.matched_text in stop_sequences:
        return "stop_sequence", finish_reason.matched_text
    return "end_turn", None


def usage(watch: FinishWatch, output_tokens: int | None = None) -> dict:
    return {
        "input_tokens": watch.prompt_tokens,
        "output_tokens": watch.completion_tokens if output_tokens is None else output_tokens,
        # Prompt tokens whose KV came from the prefix cache: Anthropic's "read from the cache".
        "cache_read_input_tokens": watch.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


def content_block(block: Block) -> dict:
    """A whole block as a Messages API content block."""
    if block.kind == TEXT:
        return {"type": "text", "text": block.text}
    if block.kind == REASONING:
        # tercet signs no reasoning: the signature is there because the block has one.
        return {"type": "thinking", "thinking": block.text, "signature": ""}
    return {"type": "tool_use", "id": block.call_id, "name": block.name, "input": block.arguments}


def empty_content_block(block: Block) -> dict:
    """What ``content_block_start`` says of a block before any of it streamed."""
    if block.kind == TEXT:
        return {"type": "text", "text": ""}
    if block.kind == REASONING:
        return {"type": "thinking", "thinking": "", "signature": ""}
    return {"type": "tool_use", "id": block.call_id, "name": block.name, "input": {}}


DELTA_TYPES = {TEXT: ("text_delta", "text"), REASONING: ("thinking_delta", "thinking")}


def content_delta(kind: str, text: str) -> dict:
    delta_type, field = DELTA_TYPES.get(kind, ("input_json_delta", "partial_json"))
    return {"type": delta_type, field: text}


def message(message_id: str, model: str, content: list[dict], reason: tuple[str | None, str | None],
            usage_: dict) -> dict:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason[0],
        "stop_sequence": reason[1],
        "usage": usage_,
    }
