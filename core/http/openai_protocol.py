"""The OpenAI wire format: request bodies in, response and stream-chunk dicts out.

Parsing validates everything the client sent and returns an :class:`OpenAIRequest`
holding the :class:`GenerateRequest` for the TokenizerManager. Unknown fields are
ignored, as OpenAI-compatible servers do, so newer clients keep working.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from tercet.errors import RequestError
from tercet.http.errors import APIError
from tercet.io_struct import GenerateOutput, GenerateRequest
from tercet.messages import FinishReason
from tercet.sampling_params import SamplingParams

# OpenAI's default for /v1/completions; chat defaults to "as much as fits".
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
CHAT_ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class OpenAIRequest:
    """A validated completions or chat completions request."""

    id: str  # "cmpl-…" or "chatcmpl-…"; also the request's rid
    model: str
    created: int
    generate_request: GenerateRequest
    include_usage: bool = False

    @property
    def stream(self) -> bool:
        return self.generate_request.stream


# -- requests -----------------------------------------------------------------


def parse_completion_request(body: dict, served_model_name: str) -> OpenAIRequest:
    model = _check_model(body, served_model_name)
    _check_n(body)
    stream, include_usage = _stream_flags(body)
    text, input_ids = _parse_prompt(body.get("prompt"))
    params = _sampling_params(body, ("max_tokens",), COMPLETIONS_DEFAULT_MAX_TOKENS)
    request_id = f"cmpl-{uuid.uuid4().hex}"
    generate_request = GenerateRequest(params, text=text, input_ids=input_ids, stream=stream, rid=request_id)
    return OpenAIRequest(request_id, model, int(time.time()), generate_request, include_usage)


def parse_chat_completion_request(
    body: dict,
    served_model_name: str,
    context_len: int,
    apply_chat_template: Callable[[list[dict]], list[int]],
) -> OpenAIRequest:
    model = _check_model(body, served_model_name)
    _check_n(body)
    stream, include_usage = _stream_flags(body)
    input_ids = apply_chat_template(parse_messages(body.get("messages")))
    room = context_len - len(input_ids)
    if room <= 0 and _first_given(body, ("max_completion_tokens", "max_tokens")) is None:
        raise RequestError(
            f"the conversation is {len(input_ids)} tokens, which leaves no room in the model's "
            f"context of {context_len} tokens; shorten the messages",
            "messages",
        )
    # max_completion_tokens is OpenAI's newer name; it wins when both are sent.
    params = _sampling_params(body, ("max_completion_tokens", "max_tokens"), room)
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    generate_request = GenerateRequest(params, input_ids=input_ids, stream=stream, rid=request_id)
    return OpenAIRequest(request_id, model, int(time.time()), generate_request, include_usage)


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
        raise RequestError(f"{where}.role must be one of {', '.join(CHAT_ROLES)}; got {role!r}", f"{where}.role")
    content = message.get("content")
    if content is None and role == "assistant":
        content = ""  # an assistant turn may omit content
    return {"role": role, "content": _content_text(content, f"{where}.content")}


def _content_text(content, where: str) -> str:
    if isinstance(content, str):
        return content
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
        texts.append(part["text"])
    return "\n".join(texts)


def _parse_prompt(prompt) -> tuple[str | None, list[int] | None]:
    if isinstance(prompt, str):
        return prompt, None
    if isinstance(prompt, list) and prompt:
        if all(_is_token_id(t) for t in prompt):
            return None, list(prompt)
        if len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            return _parse_prompt(prompt[0])
        if all(isinstance(p, (str, list)) for p in prompt):
            raise RequestError("only one prompt per request is supported for now; send one request per prompt", "prompt")
    if prompt is None:
        raise RequestError("prompt is required", "prompt")
    raise RequestError("prompt must be a string or a non-empty list of token ids", "prompt")


def _is_token_id(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_model(body: dict, served_model_name: str) -> str:
    model = body.get("model")
    if model is None:
        return served_model_name  # lenient: a missing model means the one we serve
    if not isinstance(model, str):
        raise RequestError("model must be a string", "model")
    if model != served_model_name:
        raise APIError(
            f"The model `{model}` does not exist; this server serves `{served_model_name}`.",
            "model",
            404,
            "model_not_found",
        )
    return model


def _check_n(body: dict) -> None:
    n = body.get("n")
    if n is None:
        return
    if not _is_token_id(n) or n < 1:
        raise RequestError(f"n must be a positive integer, got {n!r}", "n")
    if n > 1:
        raise RequestError(f"n={n} is not supported yet: only n=1; send {n} requests instead", "n")


def _stream_flags(body: dict) -> tuple[bool, bool]:
    stream = body.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise RequestError(f"stream must be true or false, got {stream!r}", "stream")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not stream:
        raise RequestError("stream_options is only allowed when stream is true", "stream_options")
    if not isinstance(options, dict):
        raise RequestError("stream_options must be an object", "stream_options")
    include_usage = options.get("include_usage")
    if include_usage is None:
        include_usage = False
    if not isinstance(include_usage, bool):
        raise RequestError("stream_options.include_usage must be true or false", "stream_options.include_usage")
    return stream, include_usage


def _sampling_params(body: dict, max_tokens_keys: tuple[str, ...], default_max_tokens: int) -> SamplingParams:
    max_tokens = _first_given(body, max_tokens_keys)
    params = SamplingParams(
        max_new_tokens=default_max_tokens if max_tokens is None else max_tokens,
        temperature=_given_or(body, "temperature", 1.0),
        top_p=_given_or(body, "top_p", 1.0),
        seed=body.get("seed"),
    )
    params.validate()
    return params


def _first_given(body: dict, keys: tuple[str, ...]):
    return next((body[key] for key in keys if body.get(key) is not None), None)


def _given_or(body: dict, key: str, default):
    # Clients often send an explicit null for "use the default".
    value = body.get(key)
    return default if value is None else value


# -- responses ----------------------------------------------------------------


def openai_finish_reason(finish_reason: FinishReason | None) -> str | None:
    # "stop" and "length" are OpenAI's own; an abort keeps its name.
    return None if finish_reason is None else finish_reason.kind


def usage(output: GenerateOutput) -> dict:
    return {
        "prompt_tokens": output.prompt_tokens,
        "completion_tokens": output.completion_tokens,
        "total_tokens": output.prompt_tokens + output.completion_tokens,
    }


def completion_response(request: OpenAIRequest, output: GenerateOutput) -> dict:
    choice = {"index": 0, "text": output.text, "logprobs": None, "finish_reason": openai_finish_reason(output.finish_reason)}
    return {**_envelope(request, "text_completion"), "choices": [choice], "usage": usage(output)}


def completion_chunk(request: OpenAIRequest, text: str, finish_reason: str | None = None) -> dict:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    return _chunk(request, "text_completion", choice)


def chat_completion_response(request: OpenAIRequest, output: GenerateOutput) -> dict:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": output.text},
        "logprobs": None,
        "finish_reason": openai_finish_reason(output.finish_reason),
    }
    return {**_envelope(request, "chat.completion"), "choices": [choice], "usage": usage(output)}


def chat_completion_chunk(request: OpenAIRequest, delta: dict, finish_reason: str | None = None) -> dict:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return _chunk(request, "chat.completion.chunk", choice)


def usage_chunk(request: OpenAIRequest, object_name: str, output: GenerateOutput) -> dict:
    """The extra last chunk of a stream with ``include_usage``: no choices, only usage."""
    return {**_envelope(request, object_name), "choices": [], "usage": usage(output)}


def _chunk(request: OpenAIRequest, object_name: str, choice: dict) -> dict:
    chunk = {**_envelope(request, object_name), "choices": [choice]}
    if request.include_usage:
        chunk["usage"] = None  # as OpenAI does: every chunk but the last has usage null
    return chunk


def _envelope(request: OpenAIRequest, object_name: str) -> dict:
    return {"id": request.id, "object": object_name, "created": request.created, "model": request.model}
