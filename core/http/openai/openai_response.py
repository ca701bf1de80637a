"""OpenAI response bodies and stream chunks out, for completions and chat completions."""

from __future__ import annotations

from tercet.frontend.io_struct import GenerateOutput
from tercet.http.logprobs_format import TokenStrings, chat_logprobs, completion_logprobs
from tercet.http.openai.openai_request import OpenAIRequest
from tercet.http.openai.tool_output import finish_reason_with_calls
from tercet.ipc.messages import FinishReason, TokenLogprobs

NO_LOGPROBS = TokenLogprobs([], [], [])


def openai_finish_reason(finish_reason: FinishReason | None) -> str | None:
    # "stop" and "length" are OpenAI's own; an abort keeps its name.
    return None if finish_reason is None else finish_reason.kind.value


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        # Prompt tokens whose KV came from the prefix cache.
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def usage_of(outputs: list[GenerateOutput], n: int = 1) -> dict:
    """Each prompt counts once, however many completions it had, as OpenAI counts;
    ``outputs`` are in index order, ``n`` for each prompt."""
    firsts = outputs[::n]  # one completion of each prompt
    return usage(
        sum(output.prompt_tokens for output in firsts),
        sum(output.completion_tokens for output in outputs),
        sum(output.cached_tokens for output in firsts),
    )


def prompt_text(
    request: OpenAIRequest, strings: TokenStrings | None, index: int = 0, prompt_token_ids: list[int] | None = None
) -> str:
    """Completion ``index``'s prompt as text, for ``echo``: as sent, or decoded when sent as token ids."""
    prompt = request.generate_request.prompt_at(index // request.n)
    if isinstance(prompt, str):
        return prompt
    if strings is None:
        raise RuntimeError("echoing a token-id prompt needs the tokenizer")
    return strings.decode(prompt_token_ids or prompt or [])


def output_logprobs(output: GenerateOutput) -> TokenLogprobs:
    """A piece's log-probabilities; a piece with tokens but none is a server fault, never a silent gap."""
    if output.output_logprobs is not None:
        return output.output_logprobs
    if output.token_ids:
        raise RuntimeError(f"the server returned no log-probabilities for completion {output.index}")
    return NO_LOGPROBS


def prompt_logprobs(output: GenerateOutput) -> TokenLogprobs:
    if output.prompt_logprobs is None:
        raise RuntimeError("the server returned no prompt log-probabilities for an echo request")
    return output.prompt_logprobs


# -- /v1/completions ------------------------------------------------------------


def completion_response(request: OpenAIRequest, outputs: list[GenerateOutput], strings: TokenStrings | None) -> dict:
    choices = [_completion_choice(request, output, strings) for output in outputs]
    return {**_envelope(request, "text_completion"), "choices": choices, "usage": usage_of(outputs, request.n)}


def _completion_choice(request: OpenAIRequest, output: GenerateOutput, strings: TokenStrings | None) -> dict:
    text = output.text
    logprobs = None
    if request.echo:
        text = prompt_text(request, strings, output.index, output.prompt_token_ids) + text
    if request.wants_logprobs:
        parts = [prompt_logprobs(output)] if request.echo else []
        parts.append(output_logprobs(output))
        logprobs = completion_logprobs(strings, TokenLogprobs.concat(parts), request.num_top_logprobs)
    return {"index": output.index, "text": text, "logprobs": logprobs, "finish_reason": openai_finish_reason(output.finish_reason)}


def completion_chunk(
    request: OpenAIRequest, index: int, text: str, logprobs: dict | None = None, finish_reason: str | None = None
) -> dict:
    choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
    return _chunk(request, "text_completion", choice)


# -- /v1/chat/completions -------------------------------------------------------


def chat_completion_response(request: OpenAIRequest, outputs: list[GenerateOutput], strings: TokenStrings | None) -> dict:
    choices = []
    for output in outputs:
        text, reasoning = output.text, None
        if request.reasoning is not None:
            split = request.reasoning.split(output.text)
            text, reasoning = split.content, split.reasoning or None
        message = {"role": "assistant", "content": text}
        finish_reason = openai_finish_reason(output.finish_reason)
        if request.tool_reader is not None:
            message = request.tool_reader.message(text)
            finish_reason = finish_reason_with_calls(output.finish_reason, "tool_calls" in message)
        if request.reasoning is not None:
            message["reasoning_content"] = reasoning
        logprobs = None
        if request.wants_logprobs:
            logprobs = chat_logprobs(strings, output_logprobs(output), request.num_top_logprobs)
        choices.append({"index": output.index, "message": message, "logprobs": logprobs, "finish_reason": finish_reason})
    return {**_envelope(request, "chat.completion"), "choices": choices, "usage": usage_of(outputs)}


def chat_completion_chunk(
    request: OpenAIRequest, index: int, delta: dict, logprobs: dict | None = None, finish_reason: str | None = None
) -> dict:
    choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
    return _chunk(request, "chat.completion.chunk", choice)


# -- shared ---------------------------------------------------------------------


def usage_chunk(
    request: OpenAIRequest, object_name: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
) -> dict:
    """The extra last chunk of a stream with ``include_usage``: no choices, only usage."""
    return {**_envelope(request, object_name), "choices": [], "usage": usage(prompt_tokens, completion_tokens, cached_tokens)}


def _chunk(request: OpenAIRequest, object_name: str, choice: dict) -> dict:
    chunk = {**_envelope(request, object_name), "choices": [choice]}
    if request.include_usage:
        chunk["usage"] = None  # as OpenAI does: every chunk but the last has usage null
    return chunk


def _envelope(request: OpenAIRequest, object_name: str) -> dict:
    return {"id": request.id, "object": object_name, "created": request.created, "model": request.model}
