"""OpenAI Responses API answers out: the response object, its output items, usage and status.

Output items are made from the blocks of the chat answer
(:mod:`tercet.http.chat.chat_blocks`): a ``message`` with one ``output_text`` part,
a ``function_call`` per call, and (once chat completions split reasoning off)
a ``reasoning`` item. Errors keep OpenAI's shape, as on every OpenAI route.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from tercet.http.chat.chat_blocks import REASONING, TEXT, Block
from tercet.http.chat.chat_bridge import FinishWatch
from tercet.ipc.messages import FinishKind

ITEM_ID_PREFIXES = {TEXT: "msg", REASONING: "rs"}


def new_item_id(kind: str) -> str:
    return f"{ITEM_ID_PREFIXES.get(kind, 'fc')}_{uuid.uuid4().hex}"


@dataclass(frozen=True)
class ResponseHeader:
    """What a response says of the request it answers, the same in every event of a stream."""

    id: str
    created_at: int
    model: str
    echoed: dict  # the request fields a response repeats: instructions, tools, text, ...

    @classmethod
    def of(cls, echoed: dict, model: str) -> "ResponseHeader":
        """``echoed``: the request's fields a response repeats, checked and normalised by the
        translation (:func:`tercet.http.responses.responses_request.translate`)."""
        return cls(f"resp_{uuid.uuid4().hex}", int(time.time()), model, dict(echoed))

    def response(self, status: str, output: list[dict], usage_: dict | None = None,
                 incomplete_reason: str | None = None) -> dict:
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": None if incomplete_reason is None else {"reason": incomplete_reason},
            "model": self.model,
            "output": output,
            "previous_response_id": None,
            "reasoning": None,  # unless the request sent it, which the echoed fields then repeat
            "store": False,
            "truncation": "disabled",
            "usage": usage_,
            **self.echoed,
        }


def status_of(watch: FinishWatch) -> tuple[str, str | None]:
    """``(status, incomplete reason)``: an answer cut by ``max_output_tokens`` is incomplete."""
    finish_reason = watch.finish_reason
    if finish_reason is not None and finish_reason.kind is FinishKind.LENGTH:
        return "incomplete", "max_output_tokens"
    return "completed", None


def output_items(blocks: list[Block], item_ids: list[str], status: str) -> list[dict]:
    """A whole answer's items; the last one is as complete as the answer is."""
    last = len(blocks) - 1
    return [output_item(block, item_id, status if index == last else "completed")
            for index, (block, item_id) in enumerate(zip(blocks, item_ids))]


def usage(watch: FinishWatch) -> dict:
    return {
        "input_tokens": watch.prompt_tokens,
        "input_tokens_details": {"cached_tokens": watch.cached_tokens},
        "output_tokens": watch.completion_tokens,
        # Without a reasoning parser no output token is counted as reasoning.
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": watch.prompt_tokens + watch.completion_tokens,
    }


def text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def output_item(block: Block, item_id: str, status: str = "completed") -> dict:
    """A block as a Responses output item (``status`` ``"in_progress"`` while it streams, with no text yet;
    ``"incomplete"`` for the last one of an answer cut by ``max_output_tokens``)."""
    done = status != "in_progress"
    if block.kind == TEXT:
        return {"type": "message", "id": item_id, "status": status, "role": "assistant",
                "content": [text_part(block.text)] if done else []}
    if block.kind == REASONING:
        content = [{"type": "reasoning_text", "text": block.text}] if done else []
        return {"type": "reasoning", "id": item_id, "summary": [], "content": content}
    return {"type": "function_call", "id": item_id, "call_id": block.call_id, "name": block.name,
            "arguments": block.text if done else "", "status": status}
