"""Other chat protocols served over chat completions: the Anthropic Messages API, the OpenAI Responses API.

Each protocol's body is translated into a chat completions body, which is then
read, checked, templated and generated exactly as ``/v1/chat/completions``
does (tools, structured output and sampling included); the answer comes back
as chat completion dicts (a message, or deltas) for the protocol to rewrite in
its own shape (through :mod:`tercet.http.chat.chat_blocks`). What the chat answer
does not say, how exactly a completion ended, :class:`FinishWatch` keeps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

from starlette.requests import Request

from tercet.errors import RequestError
from tercet.frontend.io_struct import GenerateOutput
from tercet.http.chat.client_fields import ClientFields
from tercet.http.control.lora_api import adapter_of_model
from tercet.http.generation import GenerationStream, collect_generation, open_generation
from tercet.http.openai.openai_api import read_chat_request
from tercet.http.openai.openai_request import OpenAIRequest, count_chat_prompt
from tercet.http.openai.openai_response import chat_completion_response
from tercet.http.openai.openai_stream import chat_completion_chunks
from tercet.http.sampling_fields import renamed
from tercet.ipc.messages import FinishReason


async def parse_chat_body(chat_body: dict, request: Request, tokenizer_manager, fields: ClientFields) -> OpenAIRequest:
    """A translated body read as ``/v1/chat/completions`` reads one (its ``model`` may name a LoRA
    adapter, as there); a refusal names the protocol's own field (``fields``)."""
    try:
        model, adapter = adapter_of_model(chat_body, tokenizer_manager)
        return await read_chat_request(chat_body, request, tokenizer_manager, model, adapter)
    except RequestError as error:
        raise fields.renamed(error) from None


async def count_chat_tokens(chat_body: dict, tokenizer_manager, fields: ClientFields) -> int:
    """The prompt tokens of a translated body, counted as ``/v1/chat/completions`` would template them,
    however long (nothing is generated); a refusal names the protocol's own field."""
    try:
        model, _ = adapter_of_model(chat_body, tokenizer_manager)
        return await count_chat_prompt(chat_body, model, tokenizer_manager.tokenize_chat, tokenizer_manager.chat_tools)
    except RequestError as error:
        raise fields.renamed(error) from None


class FinishWatch:
    """A generation's pieces, passed on, remembering how the completion ended and its token counts."""

    def __init__(self, stream: GenerationStream):
        self.stream = stream
        self.finish_reason: FinishReason | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_tokens = 0

    def __aiter__(self) -> AsyncIterator[GenerateOutput]:
        return self._watched()

    async def _watched(self) -> AsyncIterator[GenerateOutput]:
        async for piece in self.stream:
            self.note(piece)
            yield piece

    def note(self, piece: GenerateOutput) -> None:
        self.prompt_tokens, self.cached_tokens = piece.prompt_tokens, piece.cached_tokens
        self.completion_tokens = piece.completion_tokens
        if piece.finish_reason is not None:
            self.finish_reason = piece.finish_reason


@dataclasses.dataclass(frozen=True)
class ChatAnswer:
    """A whole chat completion: its message and finish reason (OpenAI's), and how it ended."""

    message: dict
    chat_finish_reason: str | None
    watch: FinishWatch


async def answer_chat(request: Request, tokenizer_manager, openai_request: OpenAIRequest,
                      fields: ClientFields) -> ChatAnswer:
    stream = await _open(request, tokenizer_manager, openai_request, fields)
    watch = FinishWatch(stream)
    outputs = await collect_generation(request, stream)
    for output in outputs:
        watch.note(output)
    (choice,) = chat_completion_response(openai_request, outputs, None)["choices"]
    return ChatAnswer(choice["message"], choice["finish_reason"], watch)


async def stream_chat(request: Request, tokenizer_manager, openai_request: OpenAIRequest,
                      fields: ClientFields) -> tuple[AsyncIterator[dict], FinishWatch]:
    """The chat completion chunks of a streamed answer, and the watch over its pieces."""
    watch = FinishWatch(await _open(request, tokenizer_manager, openai_request, fields))
    return chat_completion_chunks(openai_request, watch, None), watch


async def _open(request: Request, tokenizer_manager, openai_request: OpenAIRequest,
                fields: ClientFields) -> GenerationStream:
    try:
        return await open_generation(request, tokenizer_manager, openai_request.generate_request)
    except RequestError as error:
        # A refused constraint names its sampling parameter: the field it came from, in the protocol's name.
        constraint = fields.client_field(openai_request.constraint_field)
        raise fields.renamed(renamed(error, {"json_schema": constraint})) from None
