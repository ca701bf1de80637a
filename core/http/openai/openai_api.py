"""OpenAI-compatible routes: ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models[/{model}]``."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.errors import RequestError
from tercet.frontend.io_struct import GenerateOutput
from tercet.http.control.lora_api import adapter_of_model, loaded_adapters
from tercet.http.errors import APIError, read_json_object
from tercet.http.generation import GenerationStream, collect_generation, open_generation
from tercet.http.logprobs_format import TokenStrings, token_strings_for
from tercet.http.openai.openai_request import OpenAIRequest, parse_chat_completion_request, parse_completion_request
from tercet.http.openai.openai_response import chat_completion_response, completion_response
from tercet.http.openai.openai_stream import chat_completion_chunks, completion_chunks
from tercet.http.sampling_fields import renamed
from tercet.http.scheduling_fields import with_scheduling_fields
from tercet.http.sse import EventStreamResponse, event_stream

# /v1/models reports when this server came up as the model's "created" time.
STARTED_AT = int(time.time())

ResponseBuilder = Callable[[OpenAIRequest, list[GenerateOutput], "TokenStrings | None"], dict]
ChunkBuilder = Callable[[OpenAIRequest, GenerationStream, "TokenStrings | None"], AsyncIterator[dict]]


async def create_completion(request: Request, tokenizer_manager) -> Response:
    body = await read_json_object(request)
    model, adapter = adapter_of_model(body, tokenizer_manager)
    openai_request = parse_completion_request(body, model, tokenizer_manager.vocab_size)
    openai_request = _with_scheduling_fields(openai_request, body, request, adapter)
    return await _respond(request, tokenizer_manager, openai_request, completion_response, completion_chunks)


async def create_chat_completion(request: Request, tokenizer_manager) -> Response:
    body = await read_json_object(request)
    model, adapter = adapter_of_model(body, tokenizer_manager)
    openai_request = await read_chat_request(body, request, tokenizer_manager, model, adapter)
    return await _respond(request, tokenizer_manager, openai_request, chat_completion_response, chat_completion_chunks)


async def read_chat_request(body: dict, request: Request, tokenizer_manager, model: str | None = None,
                            adapter: str | None = None) -> OpenAIRequest:
    """A chat completions ``body`` read, checked and templated with this server's model, tokenizer,
    tools and reasoning parser, with the scheduling fields (also for the protocols bridged to it).
    ``model`` and ``adapter``: what the body's ``model`` names (:func:`adapter_of_model`, which the
    bridged protocols use too); without them, the served model and no adapter."""
    openai_request = await parse_chat_completion_request(
        body,
        model or tokenizer_manager.served_model_name,
        tokenizer_manager.context_len,
        tokenizer_manager.tokenize_chat,
        tokenizer_manager.vocab_size,
        tokenizer_manager.chat_tools,
        tokenizer_manager.reasoning,
    )
    return _with_scheduling_fields(openai_request, body, request, adapter)


async def list_models(request: Request, tokenizer_manager) -> Response:
    served = tokenizer_manager.served_model_name
    adapters = [_adapter_object(adapter, served) for adapter in await loaded_adapters(tokenizer_manager)]
    return JSONResponse({"object": "list", "data": [_model_object(served), *adapters]})


async def retrieve_model(request: Request, tokenizer_manager) -> Response:
    # The route's path converter takes the rest of the (percent-decoded) path,
    # so "org/model", sent as is or as "org%2Fmodel", arrives whole.
    model = request.path_params["model"]
    served = tokenizer_manager.served_model_name
    adapter = next((entry for entry in await loaded_adapters(tokenizer_manager) if entry["name"] == model), None)
    if adapter is not None:
        return JSONResponse(_adapter_object(adapter, served))
    if model != served:
        # Worded as a completion's unknown "model" is, in the same OpenAI shape.
        message = f"The model `{model}` does not exist; this server serves `{served}`."
        raise APIError(message, "model", 404, "model_not_found")
    return JSONResponse(_model_object(served))


def _model_object(model: str) -> dict:
    return {"id": model, "object": "model", "created": STARTED_AT, "owned_by": "tercet"}


def _adapter_object(adapter: dict, served: str) -> dict:
    """A LoRA adapter as a model: its ``parent`` is the base it adapts (vLLM's and SGLang's shape)."""
    return {**_model_object(adapter["name"]), "root": adapter["path"], "parent": served}


async def _respond(
    request: Request,
    tokenizer_manager,
    openai_request: OpenAIRequest,
    build_response: ResponseBuilder,
    build_chunks: ChunkBuilder,
) -> Response:
    strings = _token_strings(tokenizer_manager, openai_request)
    # A refusal names a sampling parameter: here, the request field it came from.
    renames = {"json_schema": openai_request.constraint_field}
    try:
        stream = await open_generation(request, tokenizer_manager, openai_request.generate_request)
        if openai_request.stream:
            chunks = build_chunks(openai_request, stream, strings)
            return EventStreamResponse(event_stream(chunks), on_close=stream.aclose)
        outputs = await collect_generation(request, stream)
    except RequestError as error:
        raise renamed(error, renames) from None
    return JSONResponse(build_response(openai_request, outputs, strings))


def _with_scheduling_fields(openai_request: OpenAIRequest, body: dict, request: Request,
                            adapter: str | None = None) -> OpenAIRequest:
    generate_request = with_scheduling_fields(openai_request.generate_request, body, request)
    generate_request = dataclasses.replace(generate_request, lora_name=adapter)
    return dataclasses.replace(openai_request, generate_request=generate_request)


def _token_strings(tokenizer_manager, openai_request: OpenAIRequest) -> TokenStrings | None:
    # Only log-probabilities and echoing a token-id prompt need token text.
    echoes_token_ids = openai_request.echo and openai_request.generate_request.text is None
    if not (openai_request.wants_logprobs or echoes_token_ids):
        return None
    return token_strings_for(tokenizer_manager.tokenizer)

