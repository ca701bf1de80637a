"""One streamed ``/v1/completions`` request, timed chunk by chunk.

The stream is server-sent events: ``data: {chunk}`` lines ending with
``data: [DONE]``. Times are taken as each line is read:

- TTFT is the wait from sending the request to the first chunk that carries
  output (non-empty text).
- Inter-token latencies are the gaps between later output chunks. OpenAI's
  stream does not say how many tokens a chunk holds (``usage`` is null until
  the last chunk), so one non-empty text chunk counts as one token. Usage on
  the finish chunk (llama.cpp sends it there) is the total, not a count per
  chunk. A server that puts a running ``usage`` on every chunk tells us more: a chunk that
  adds k completion tokens then counts as k tokens, its gap split evenly among
  them. ``has_tokens_per_chunk`` says which of the two a request had.
- The output token count is the final usage's ``completion_tokens`` when the
  server sends it (``stream_options.include_usage``), else the counted tokens.

A request that does not end with ``[DONE]`` — refused with an HTTP error, an
error event, a broken connection — is a failure carrying the error's text.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace

import httpx

MAX_ERROR_CHARS = 300


@dataclass(frozen=True)
class RequestOutcome:
    is_success: bool
    error: str  # empty on success
    prompt_len: int  # prompt tokens as the benchmark built the prompt
    server_prompt_tokens: int | None  # as the server's usage reports them, if it does
    output_tokens: int
    ttft: float | None  # seconds; None when no output arrived
    itl: tuple[float, ...]  # seconds, one per token after the first chunk
    latency: float  # seconds from sending to the end of the stream
    has_tokens_per_chunk: bool = False

    def failed(self, error: str) -> RequestOutcome:
        return replace(self, is_success=False, error=error)


async def stream_completion(
    client: httpx.AsyncClient, url: str, payload: dict, headers: dict, prompt_len: int
) -> RequestOutcome:
    """POST ``payload`` (which must ask for ``stream: true``) to ``url`` and time the answer."""
    tally = ChunkTally(time.perf_counter())
    try:
        async with client.stream("POST", url, json=payload, headers=headers) as response:
            if response.status_code != 200:
                body = (await response.aread()).decode(errors="replace")
                return tally.outcome(prompt_len, f"HTTP {response.status_code}: {_shorten(body)}")
            async for line in response.aiter_lines():
                data = sse_data(line)
                if data is None:
                    continue
                if data == "[DONE]":
                    tally.end = time.perf_counter()
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    return tally.outcome(prompt_len, f"error event: {_error_message(chunk['error'])}")
                tally.note(chunk, time.perf_counter())
    except httpx.HTTPError as error:
        return tally.outcome(prompt_len, describe_http_error(error))
    except ValueError as error:  # a data line that is not JSON
        return tally.outcome(prompt_len, f"malformed stream: {_shorten(str(error))}")
    if tally.end is None:
        if not tally.has_finished:
            return tally.outcome(prompt_len, "the stream ended without [DONE]")
        # Some servers (transformers serve) close the stream after the finish
        # chunk and never send [DONE]: a clean close after a finish is an end.
        tally.end = time.perf_counter()
    return tally.outcome(prompt_len)


def sse_data(line: str) -> str | None:
    """The payload of a ``data:`` line; None for blank lines, comments and other fields."""
    if not line.startswith("data:"):
        return None
    data = line[len("data:"):]
    return data.removeprefix(" ")


def describe_http_error(error: httpx.HTTPError) -> str:
    # Some httpx errors (timeouts) have no message of their own; the class name says it.
    text = str(error)
    return f"{type(error).__name__}: {_shorten(text)}" if text else type(error).__name__


class ChunkTally:
    """What a stream has shown so far: token arrivals, usage, the end."""

    def __init__(self, start: float):
        self.start = start
        self.end: float | None = None
        self.first_output: float | None = None
        self.last_output = start
        self.itl: list[float] = []
        self.num_tokens = 0
        self.running_completion_tokens = 0
        self.has_tokens_per_chunk = False
        self.final_usage: dict | None = None
        self.has_finished = False  # a chunk carried a finish_reason

    def note(self, chunk: dict, now: float) -> None:
        choices = chunk.get("choices") or []
        usage = chunk.get("usage")
        # The final usage comes on a chunk of its own (OpenAI) or on the
        # finish chunk (llama.cpp): either way it is the total, not a running count.
        is_last = not choices or any(choice.get("finish_reason") for choice in choices)
        self.has_finished = self.has_finished or bool(choices) and is_last
        if usage and is_last:
            self.final_usage = usage
        if choices:
            self._count_tokens(self._new_tokens(choices, usage, is_last), now)

    def _new_tokens(self, choices: list[dict], usage: dict | None, is_last: bool) -> int:
        """Tokens this chunk delivered: by the server's running usage, else one per chunk with text."""
        if usage and (self.has_tokens_per_chunk or not is_last):
            self.has_tokens_per_chunk = True
            num_new = usage.get("completion_tokens", 0) - self.running_completion_tokens
            self.running_completion_tokens += num_new
            return num_new
        return 1 if any(choice.get("text") for choice in choices) else 0

    def _count_tokens(self, num_new: int, now: float) -> None:
        if num_new <= 0:
            return
        if self.first_output is None:
            self.first_output = now
        else:
            gap = (now - self.last_output) / num_new
            self.itl.extend([gap] * num_new)
        self.last_output = now
        self.num_tokens += num_new

    def outcome(self, prompt_len: int, error: str = "") -> RequestOutcome:
        end = self.end if self.end is not None else time.perf_counter()
        usage = self.final_usage or {}
        return RequestOutcome(
            is_success=not error,
            error=error,
            prompt_len=prompt_len,
            server_prompt_tokens=usage.get("prompt_tokens"),
            output_tokens=usage.get("completion_tokens", self.num_tokens),
            ttft=None if self.first_output is None else self.first_output - self.start,
            itl=tuple(self.itl),
            latency=end - self.start,
            has_tokens_per_chunk=self.has_tokens_per_chunk,
        )


def _error_message(error) -> str:
    if isinstance(error, dict):
        return _shorten(str(error.get("message", error)))
    return _shorten(str(error))


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"
