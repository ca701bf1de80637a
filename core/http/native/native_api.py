"""``POST /generate``, SGLang's native API.

Body: ``{"text": str | "input_ids": [int], "sampling_params": {...}, "stream": bool,
"rid": str}`` plus the log-probability switches (:mod:`tercet.http.native.native_request`).
The answer is ``{"text", "output_ids", "meta_info"}``; a stream sends the same
objects with cumulative ``text``, ``output_ids`` and log-probabilities, then
``[DONE]``. With ``n > 1``, or a batch (``text`` a list of strings,
``input_ids`` a list of lists), every object also has ``index``
(``prompt × n + i``), and the answer without streaming is a list of them in
index order; a stream interleaves the completions' objects, as SGLang does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.errors import RequestError
from tercet.frontend.io_struct import GenerateOutput
from tercet.http.control.lora_api import adapter_of_native
from tercet.http.errors import raise_if_refused, read_json_object
from tercet.http.generation import (
    ChoiceAccumulator,
    GenerationStream,
    PromptDetails,
    check_index,
    collect_generation,
    open_generation,
)
from tercet.http.logprobs_format import TokenStrings, native_token_logprobs, native_top_logprobs, token_strings_for
from tercet.http.native.native_request import NativeRequest, parse_generate_request
from tercet.http.sampling_fields import renamed
from tercet.http.scheduling_fields import with_scheduling_fields
from tercet.http.sse import EventStreamResponse, event_stream
from tercet.ipc.messages import TokenLogprobs
from tercet.sampling_params import CONSTRAINT_FIELDS

NO_LOGPROBS = TokenLogprobs([], [], [])


async def generate(request: Request, tokenizer_manager) -> Response:
    body = await read_json_object(request)
    native_request = parse_generate_request(body, tokenizer_manager.vocab_size)
    strings = token_strings_for(tokenizer_manager.tokenizer) if native_request.return_text_in_logprobs else None
    generate_request = with_scheduling_fields(native_request.generate_request, body, request)
    generate_request = dataclasses.replace(generate_request, lora_name=adapter_of_native(body))
    try:
        stream = await open_generation(request, tokenizer_manager, generate_request)
    except RequestError as error:  # a refusal names a sampling parameter
        raise renamed(error, {field: f"sampling_params.{field}" for field in CONSTRAINT_FIELDS}) from None
    if generate_request.stream:
        events = _cumulative_outputs(native_request, stream, strings)
        return EventStreamResponse(event_stream(events), on_close=stream.aclose)
    outputs = await collect_generation(request, stream)
    firsts = outputs[:: stream.n]  # one completion of each prompt
    if generate_request.sampling_params.return_prompt_logprob and any(o.prompt_logprobs is None for o in firsts):
        raise RuntimeError("the server returned no prompt log-probabilities")
    objects = [native_output(native_request, output, strings) for output in outputs]
    return JSONResponse(objects if _is_listed(native_request) else objects[0])


async def _cumulative_outputs(
    native_request: NativeRequest, stream: GenerationStream, strings: TokenStrings | None
) -> AsyncIterator[dict]:
    # SGLang streams the whole output so far in every event, not deltas.
    choices = [ChoiceAccumulator(index) for index in range(stream.num_choices)]
    prompts = [PromptDetails() for _ in range(stream.num_prompts)]
    async for piece in stream:
        raise_if_refused(piece.finish_reason)
        check_index(piece, len(choices))
        prompt = prompts[piece.index // stream.n]
        prompt.note(piece)
        choice = choices[piece.index]
        choice.add(piece)
        if piece.text or piece.token_ids or piece.finished:
            yield native_output(native_request, choice.output(prompt), strings)
        if all(choice.finished for choice in choices):
            return


def native_output(native_request: NativeRequest, output: GenerateOutput, strings: TokenStrings | None = None) -> dict:
    params = native_request.sampling_params
    finish_reason = output.finish_reason
    meta_info = {
        "id": output.rid,
        "finish_reason": None if finish_reason is None else finish_reason.to_json(),
        "prompt_tokens": output.prompt_tokens,
        "cached_tokens": output.cached_tokens,
        "completion_tokens": output.completion_tokens,
    }
    if params.return_logprob:
        logprobs = output.output_logprobs or NO_LOGPROBS
        meta_info["output_token_logprobs"] = native_token_logprobs(strings, logprobs)
        meta_info["output_top_logprobs"] = native_top_logprobs(strings, logprobs, params.top_logprobs_num)
    if params.return_prompt_logprob and output.prompt_logprobs is not None:
        prompt_logprobs = _from_position(output.prompt_logprobs, native_request.logprob_start_len)
        meta_info["input_token_logprobs"] = native_token_logprobs(strings, prompt_logprobs)
        meta_info["input_top_logprobs"] = native_top_logprobs(strings, prompt_logprobs, params.top_logprobs_num)
    body = {"text": output.text, "output_ids": output.token_ids, "meta_info": meta_info}
    if _is_listed(native_request):
        body["index"] = output.index
    return body


def _is_listed(native_request: NativeRequest) -> bool:
    """Whether the request has several completions to tell apart (or asked for a list, a batch)."""
    return native_request.sampling_params.n > 1 or native_request.generate_request.is_batch


def _from_position(logprobs: TokenLogprobs, start: int) -> TokenLogprobs:
    if start == 0:
        return logprobs
    return TokenLogprobs(logprobs.token_ids[start:], logprobs.logprobs[start:], list(logprobs.top or [])[start:])

