"""OpenAI request bodies in: ``/v1/completions`` and ``/v1/chat/completions``.

Parsing validates everything the client sent and returns an :class:`OpenAIRequest`
holding the :class:`GenerateRequest` for the TokenizerManager. Unknown fields are
ignored, as OpenAI-compatible servers do, so newer clients keep working; known
fields whose behaviour tercet does not have (tools, ``suffix``, ``best_of``)
are a 400 rather than an answer that silently ignores them. ``response_format``
(JSON mode and JSON Schemas) is taken on both routes
(:mod:`tercet.http.structured_output`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tercet.errors import RequestError
from tercet.field_checks import check_text, check_texts, is_integer, shown
from tercet.frontend.io_struct import GenerateRequest
from tercet.http.errors import APIError
from tercet.http.openai.chat_messages import parse_messages
from tercet.http.openai.tool_request import parse_tool_request
from tercet.http.sampling_fields import (
    parse_flag,
    parse_token_ids,
    parse_top_logprobs,
    sampling_params_from_body,
)
from tercet.reasoning.reader import ReasoningReader
from tercet.tools.reader import ToolCallReader
from tercet.tools.request import ToolRequest

# OpenAI's default for /v1/completions; chat defaults to "as much as fits".
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True)
class OpenAIRequest:
    """A validated completions or chat completions request."""

    id: str  # "cmpl-…" or "chatcmpl-…"; also the request's rid
    model: str
    created: int
    generate_request: GenerateRequest
    include_usage: bool = False
    # Completions only: return the prompt before each completion's text.
    echo: bool = False
    # Chat with tools: how the answer is searched for tool calls (None: it is not).
    tool_reader: ToolCallReader | None = None
    # The request field a JSON Schema constraint came from, for the error when it cannot be compiled.
    constraint_field: str = "response_format"
    # Chat with a reasoning parser and separate_reasoning: how reasoning is told from the answer.
    reasoning: ReasoningReader | None = None

    @property
    def stream(self) -> bool:
        return self.generate_request.stream

    @property
    def n(self) -> int:
        """Completions per prompt."""
        return self.generate_request.sampling_params.n

    @property
    def num_prompts(self) -> int:
        return self.generate_request.num_prompts

    @property
    def wants_logprobs(self) -> bool:
        return self.generate_request.sampling_params.return_logprob

    @property
    def num_top_logprobs(self) -> int:
        return self.generate_request.sampling_params.top_logprobs_num


# -- /v1/completions ------------------------------------------------------------


def parse_completion_request(body: dict, served_model_name: str, vocab_size: int | None = None) -> OpenAIRequest:
    model = check_model(body, served_model_name)
    stream, include_usage = _stream_flags(body)
    prompt = _parse_prompt(body.get("prompt"), vocab_size)
    _refuse_suffix_and_best_of(body)
    echo = parse_flag(body, "echo")
    logprobs = body.get("logprobs")
    if logprobs is not None:
        logprobs = parse_top_logprobs(logprobs, "logprobs")
    max_tokens = body.get("max_tokens")
    params = sampling_params_from_body(
        body,
        max_tokens_key="max_tokens",
        max_new_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        return_logprob=logprobs is not None,
        top_logprobs_num=logprobs or 0,
        return_prompt_logprob=echo and logprobs is not None,
        vocab_size=vocab_size,
        param_names={"top_logprobs": "logprobs"},
    )
    request_id = f"cmpl-{uuid.uuid4().hex}"
    generate_request = GenerateRequest(params, stream=stream, rid=request_id, **prompt)
    return OpenAIRequest(request_id, model, int(time.time()), generate_request, include_usage, echo)


PROMPT_SHAPES = "a string, a list of token ids, a list of strings or a list of token-id lists"


def _parse_prompt(prompt, vocab_size: int | None) -> dict:
    """The prompt as :class:`GenerateRequest` fields: ``text``, ``input_ids``, or a batch's ``prompts``."""
    if isinstance(prompt, str):
        return _one_prompt(prompt, vocab_size)
    _check_prompt_list(prompt)
    if all(is_integer(t) for t in prompt):
        return _one_prompt(prompt, vocab_size)
    if len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        # OpenAI's one-element list is that one prompt: the answer is the same.
        return _one_prompt(prompt[0], vocab_size)
    return {"prompts": _prompt_batch(prompt, vocab_size)}


def _check_prompt_list(prompt) -> None:
    if prompt is None:
        raise RequestError("prompt is required", "prompt")
    if not isinstance(prompt, list) or not prompt:
        raise RequestError(f"prompt must be {PROMPT_SHAPES}; a list must be non-empty", "prompt")


def _one_prompt(prompt: str | list, vocab_size: int | None) -> dict:
    if isinstance(prompt, str):
        check_text(prompt, "prompt")
        return {"text": prompt}
    return {"input_ids": list(parse_token_ids(prompt, "prompt", vocab_size))}


def _prompt_batch(prompts: list, vocab_size: int | None) -> list[str] | list[list[int]]:
    if all(isinstance(p, str) for p in prompts):
        check_texts(prompts, "prompt")
        return list(prompts)
    if all(isinstance(p, list) for p in prompts):
        return [list(parse_token_ids(ids, f"prompt[{i}]", vocab_size)) for i, ids in enumerate(prompts)]
    raise RequestError(f"prompt must be {PROMPT_SHAPES} (one list may not mix strings and token ids)", "prompt")


def _refuse_suffix_and_best_of(body: dict) -> None:
    if body.get("suffix") not in (None, ""):
        raise RequestError("suffix (insertion after the completion) is not supported", "suffix")
    best_of, n = body.get("best_of"), body.get("n") or 1
    if best_of is not None and best_of != n:
        raise RequestError(
            f"best_of={shown(best_of)} is not supported: the server does not rank completions; use n instead", "best_of"
        )


# -- /v1/chat/completions -------------------------------------------------------

# Chat fields whose feature tercet lacks: sending them (with a value other than null or
# false) is a 400 naming them, not an answer that silently goes without. Fields that are
# only bookkeeping for OpenAI's service (store, metadata, service_tier, user) are taken.
UNSUPPORTED_CHAT_FIELDS = {
    "echo": "echo is only supported on /v1/completions",
    "audio": "audio output is not supported; this server answers in text",
    "web_search_options": "web search is not supported",
    "prediction": "predicted outputs are not supported",
}
# What "modalities" may ask for.
OUTPUT_MODALITIES = ("text",)


async def parse_chat_completion_request(
    body: dict,
    served_model_name: str,
    context_len: int,
    tokenize_chat: Callable[..., Awaitable[list[int]]],
    vocab_size: int | None = None,
    chat_tools=None,
    reasoning: ReasoningReader | None = None,
) -> OpenAIRequest:
    """``tokenize_chat(messages, max_new_tokens, tools, generation_prefix)``
    templates and tokenizes the conversation (off the event loop, in the
    server), refusing one too long for ``max_new_tokens`` more tokens.
    ``chat_tools`` (:class:`tercet.frontend.chat_tools.ChatTools`) serves requests
    that send tools; without it they are refused. ``reasoning`` (the server's
    reasoning parser, if it has one) separates the answer's reasoning, unless
    ``separate_reasoning`` is false."""
    model = check_model(body, served_model_name)
    stream, include_usage = _stream_flags(body)
    _refuse_unsupported_chat_fields(body)
    tool_request = _parse_chat_tools(body, chat_tools)
    reasoning = reasoning if _separates_reasoning(body) else None
    # Where the reasoning ends, for a constraint to start after it (None: it applies from the start).
    frame = reasoning.frame if reasoning is not None else None
    logprobs, top_logprobs = _chat_logprob_flags(body)
    max_tokens_key, max_tokens = _chat_max_tokens(body)
    reserved = _reserved_tokens(max_tokens, context_len)
    input_ids = await _chat_prompt(body, tool_request, chat_tools, tokenize_chat, reserved, frame is not None)
    # A forced tool call is a constraint of its own: the schema of the one call allowed.
    forced = tool_request if tool_request is not None and tool_request.is_forced else None
    params = sampling_params_from_body(
        body,
        max_tokens_key=max_tokens_key,
        max_new_tokens=_room_left(input_ids, context_len) if max_tokens is None else max_tokens,
        return_logprob=logprobs,
        top_logprobs_num=top_logprobs,
        vocab_size=vocab_size,
        forced_schema=forced.forced_call_schema() if forced is not None else None,
        reasoning_frame=frame,
    )
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    generate_request = GenerateRequest(params, input_ids=input_ids, stream=stream, rid=request_id)
    tool_reader = chat_tools.reader(tool_request) if chat_tools is not None else None
    constraint_field = forced.schema_field if forced is not None else "response_format"
    return OpenAIRequest(request_id, model, int(time.time()), generate_request, include_usage,
                         tool_reader=tool_reader, constraint_field=constraint_field, reasoning=reasoning)


async def count_chat_prompt(body: dict, served_model_name: str, tokenize_chat: Callable[..., Awaitable[list[int]]],
                            chat_tools=None) -> int:
    """The tokens of a chat body's prompt, its messages and tools through the chat template, however
    long: nothing is generated, so neither the context nor a max_tokens bounds what is counted."""
    check_model(body, served_model_name)
    tool_request = _parse_chat_tools(body, chat_tools)
    return len(await _chat_prompt(body, tool_request, chat_tools, tokenize_chat, None))


def _separates_reasoning(body: dict) -> bool:
    """``separate_reasoning`` (SGLang's field): true unless the client says false."""
    return body.get("separate_reasoning") is None or parse_flag(body, "separate_reasoning")


def _parse_chat_tools(body: dict, chat_tools) -> ToolRequest | None:
    tool_request = parse_tool_request(body)
    if tool_request is not None and chat_tools is None:
        raise RequestError("tools: tool calling is not available on this server", "tools")
    return tool_request


def _chat_max_tokens(body: dict) -> tuple[str, object]:
    """The field the max tokens come from, and its value as sent (None: fill the context)."""
    # max_completion_tokens is OpenAI's newer name; it wins when both are sent.
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    return key, body.get(key)


def _reserved_tokens(max_tokens, context_len: int) -> int:
    """The tokens to keep free while the conversation is measured."""
    # A bad max_tokens is refused with the sampling parameters, with its own message; none is reserved for it.
    is_sound = is_integer(max_tokens) and 0 <= max_tokens <= context_len
    return max_tokens if is_sound else 0


async def _chat_prompt(body: dict, tool_request: ToolRequest | None, chat_tools, tokenize_chat, reserved: int | None,
                       reasons_first: bool = False) -> list[int]:
    """The conversation's prompt tokens: its messages (and tools) through the chat template
    (``reserved`` None: only counted, so not bounded by the context)."""
    messages, tools, prefix = parse_messages(body.get("messages")), None, ""
    if chat_tools is not None:
        messages, tools = chat_tools.conversation(messages, tool_request)
        # A model that reasons first writes a forced call after its reasoning, kept to
        # the call's schema by the grammar: nothing may open the call before it.
        prefix = "" if reasons_first else chat_tools.generation_prefix(tool_request)
    return await tokenize_chat(messages, reserved, tools, prefix)


def _room_left(input_ids: list[int], context_len: int) -> int:
    """What the context leaves for the answer, when the request does not say how much it wants."""
    room = context_len - len(input_ids)
    if room <= 0:
        raise RequestError(
            f"the conversation is {len(input_ids)} tokens, which leaves no room in the model's "
            f"context of {context_len} tokens; shorten the messages",
            "messages",
        )
    return room


def _refuse_unsupported_chat_fields(body: dict) -> None:
    for key, reason in UNSUPPORTED_CHAT_FIELDS.items():
        if body.get(key) not in (None, False):
            raise RequestError(f"{key}: {reason}", key)
    modalities = body.get("modalities")
    # Compared one by one (a list or an object in it cannot go into a set).
    if modalities is not None and (not isinstance(modalities, list)
                                   or any(modality not in OUTPUT_MODALITIES for modality in modalities)):
        raise RequestError(f'modalities: only ["text"] is supported, got {shown(modalities)}', "modalities")


def _chat_logprob_flags(body: dict) -> tuple[bool, int]:
    logprobs = parse_flag(body, "logprobs")
    top_logprobs = body.get("top_logprobs")
    if top_logprobs is None:
        return logprobs, 0
    top_logprobs = parse_top_logprobs(top_logprobs, "top_logprobs")
    if top_logprobs and not logprobs:
        raise RequestError("top_logprobs needs logprobs set to true", "top_logprobs")
    return logprobs, top_logprobs


# -- shared ---------------------------------------------------------------------


def check_model(body: dict, served_model_name: str) -> str:
    model = body.get("model")
    if model is None:
        return served_model_name  # lenient: a missing model means the one we serve
    if not isinstance(model, str):
        raise RequestError("model must be a string", "model")
    check_text(model, "model")
    if model != served_model_name:
        raise APIError(
            f"The model `{model}` does not exist; this server serves `{served_model_name}`.",
            "model",
            404,
            "model_not_found",
        )
    return model


def _stream_flags(body: dict) -> tuple[bool, bool]:
    stream = parse_flag(body, "stream")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    # Without stream the options have nothing to act on: checked, then ignored,
    # so a client that always sends them works either way.
    if not isinstance(options, dict):
        raise RequestError("stream_options must be an object", "stream_options")
    include_usage = options.get("include_usage")
    if include_usage is None:
        include_usage = False
    if not isinstance(include_usage, bool):
        raise RequestError("stream_options.include_usage must be true or false", "stream_options.include_usage")
    return stream, stream and include_usage
