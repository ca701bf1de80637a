"""``POST /generate``, SGLang's native API.

Body: ``{"text": str | "input_ids": [int], "sampling_params": {...}, "stream": bool,
"rid": str}``. The answer is ``{"text", "output_ids", "meta_info"}``; a stream sends
the same objects with cumulative ``text`` and ``output_ids``, then ``[DONE]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.errors import RequestError
from tercet.http.errors import raise_if_refused, read_json_object
from tercet.http.generation import GenerationStream, collect_generation, open_generation
from tercet.http.sse import EventStreamResponse, event_stream
from tercet.io_struct import GenerateOutput, GenerateRequest
from tercet.sampling_params import SamplingParams

SAMPLING_PARAM_NAMES = tuple(field.name for field in dataclasses.fields(SamplingParams))
BOOLEAN_SAMPLING_PARAMS = ("ignore_eos", "skip_special_tokens")
# SamplingParams.validate names parameters the OpenAI way.
NATIVE_PARAM_NAMES = {"max_tokens": "max_new_tokens"}


# -- POST /generate -----------------------------------------------------------


async def generate(request: Request, tokenizer_manager) -> Response:
    generate_request = parse_generate_request(await read_json_object(request))
    stream = await open_generation(request, tokenizer_manager, generate_request)
    if generate_request.stream:
        return EventStreamResponse(event_stream(_cumulative_outputs(stream)), on_close=stream.aclose)
    output = await collect_generation(request, stream)
    return JSONResponse(native_output(output, output.text, output.token_ids))


def parse_generate_request(body: dict) -> GenerateRequest:
    text, input_ids = body.get("text"), body.get("input_ids")
    if (text is None) == (input_ids is None):
        raise RequestError("send exactly one of text and input_ids", "text")
    if text is not None and not isinstance(text, str):
        raise RequestError("text must be a string (batches are not supported yet)", "text")
    if input_ids is not None and not _is_token_id_list(input_ids):
        raise RequestError("input_ids must be a non-empty list of non-negative integers", "input_ids")
    stream = body.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise RequestError(f"stream must be true or false, got {stream!r}", "stream")
    rid = body.get("rid")
    if rid is not None and (not isinstance(rid, str) or not rid):
        raise RequestError("rid must be a non-empty string", "rid")
    sampling_params = _parse_sampling_params(body.get("sampling_params"))
    return GenerateRequest(sampling_params, text=text, input_ids=input_ids, stream=stream, rid=rid)


def _parse_sampling_params(raw) -> SamplingParams:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RequestError("sampling_params must be an object", "sampling_params")
    for key, value in raw.items():
        if key not in SAMPLING_PARAM_NAMES:
            raise RequestError(
                f"unknown sampling_params key {key!r}; known keys: {', '.join(SAMPLING_PARAM_NAMES)}",
                f"sampling_params.{key}",
            )
        if key in BOOLEAN_SAMPLING_PARAMS and value is not None and not isinstance(value, bool):
            raise RequestError(f"sampling_params.{key} must be true or false", f"sampling_params.{key}")
    if raw.get("stop_token_ids") is not None and not isinstance(raw["stop_token_ids"], list):
        raise RequestError("sampling_params.stop_token_ids must be a list", "sampling_params.stop_token_ids")
    params = SamplingParams(**{key: value for key, value in raw.items() if value is not None})
    try:
        params.validate()
    except RequestError as exc:
        name = NATIVE_PARAM_NAMES.get(exc.param, exc.param)
        message = exc.message.replace(exc.param, name, 1) if exc.param else exc.message
        raise RequestError(message, f"sampling_params.{name}", exc.status_code) from None
    return params


def _is_token_id_list(value) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    )


async def _cumulative_outputs(stream: GenerationStream) -> AsyncIterator[dict]:
    # SGLang streams the whole text so far in every event, not deltas.
    text = ""
    token_ids: list[int] = []
    async for piece in stream:
        raise_if_refused(piece.finish_reason)
        if not (piece.text or piece.token_ids or piece.finished):
            continue
        text += piece.text
        token_ids.extend(piece.token_ids)
        yield native_output(piece, text, list(token_ids))
        if piece.finished:
            return


def native_output(piece: GenerateOutput, text: str, output_ids: list[int]) -> dict:
    finish_reason = piece.finish_reason
    return {
        "text": text,
        "output_ids": output_ids,
        "meta_info": {
            "id": piece.rid,
            "finish_reason": None if finish_reason is None else finish_reason.to_json(),
            "prompt_tokens": piece.prompt_tokens,
            "completion_tokens": piece.completion_tokens,
        },
    }


ROUTES = [("/generate", generate, ["POST"])]
