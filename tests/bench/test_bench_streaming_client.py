import pytest

from tercet.bench.serving import judged
from tercet.bench.streaming_client import ChunkTally, sse_data


def text_chunk(text, usage=None):
    return {"choices": [{"index": 0, "text": text, "finish_reason": None}], "usage": usage}


def test_sse_data_reads_data_lines_only():
    assert sse_data('data: {"a": 1}') == '{"a": 1}'
    assert sse_data("data:[DONE]") == "[DONE]"
    assert sse_data("") is None
    assert sse_data(": keep-alive") is None
    assert sse_data("event: message") is None


def test_tally_counts_text_chunks_as_tokens_and_takes_usage_for_the_total():
    tally = ChunkTally(start=10.0)
    tally.note(text_chunk("Hello"), 10.5)
    tally.note(text_chunk(" wor"), 10.6)
    tally.note(text_chunk(""), 10.65)  # finish chunk: no token
    tally.note(text_chunk("ld"), 10.9)
    tally.note({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4}}, 10.95)
    tally.end = 11.0
    outcome = tally.outcome(prompt_len=6)
    assert outcome.is_success
    assert outcome.ttft == pytest.approx(0.5)
    assert outcome.itl == pytest.approx((0.1, 0.3))
    assert outcome.latency == pytest.approx(1.0)
    assert (outcome.output_tokens, outcome.server_prompt_tokens, outcome.prompt_len) == (4, 7, 6)
    assert not outcome.has_tokens_per_chunk


def test_tally_splits_a_chunk_of_k_tokens_when_usage_comes_per_chunk():
    tally = ChunkTally(start=0.0)
    tally.note(text_chunk("a", {"completion_tokens": 1}), 0.2)
    tally.note(text_chunk("bcd", {"completion_tokens": 4}), 0.5)
    tally.end = 0.6
    outcome = tally.outcome(prompt_len=3)
    assert outcome.itl == pytest.approx((0.1, 0.1, 0.1))
    assert outcome.output_tokens == 4  # counted: no final usage chunk
    assert outcome.has_tokens_per_chunk


def test_without_usage_the_counted_tokens_are_the_output():
    tally = ChunkTally(start=0.0)
    for step in range(3):
        tally.note(text_chunk("x"), 0.1 * (step + 1))
    assert tally.outcome(prompt_len=1).output_tokens == 3


def test_an_error_makes_a_failed_outcome():
    outcome = ChunkTally(start=0.0).outcome(prompt_len=1, error="HTTP 503: busy")
    assert not outcome.is_success and outcome.error == "HTTP 503: busy"
    assert outcome.ttft is None


def test_fewer_tokens_than_asked_is_a_failure():
    tally = ChunkTally(start=0.0)
    tally.note(text_chunk("x"), 0.1)
    tally.end = 0.2
    short = judged(tally.outcome(prompt_len=1), output_len=4)
    assert not short.is_success and short.error == "1 of 4 output tokens"
    assert judged(tally.outcome(prompt_len=1), output_len=1).is_success


def test_usage_on_the_finish_chunk_is_the_total_not_a_burst_of_tokens():
    # llama.cpp's server: text chunks without usage, then usage on the finish chunk.
    tally = ChunkTally(start=0.0)
    for step in range(3):
        tally.note(text_chunk("x"), 0.1 * (step + 1))
    finish = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
              "usage": {"prompt_tokens": 5, "completion_tokens": 3}}
    tally.note(finish, 0.35)
    outcome = tally.outcome(prompt_len=5)
    assert outcome.itl == pytest.approx((0.1, 0.1))
    assert outcome.output_tokens == 3 and outcome.server_prompt_tokens == 5
    assert not outcome.has_tokens_per_chunk


def _stream_of(events: list[str]):
    import asyncio

    import httpx

    from tercet.bench.streaming_client import stream_completion

    body = "".join(f"data: {event}\n\n" for event in events).encode()
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body))

    async def run():
        async with httpx.AsyncClient(transport=transport) as client:
            return await stream_completion(client, "http://server/v1/completions", {"stream": True}, {}, 3)

    return asyncio.run(run())


def test_a_stream_closed_after_its_finish_chunk_without_done_is_complete():
    import json

    finish = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    outcome = _stream_of([json.dumps(text_chunk("a")), json.dumps(text_chunk("b")), json.dumps(finish)])
    assert outcome.is_success and outcome.output_tokens == 2


def test_a_stream_cut_before_any_finish_is_a_failure():
    import json

    outcome = _stream_of([json.dumps(text_chunk("a")), json.dumps(text_chunk("b"))])
    assert not outcome.is_success and outcome.error == "the stream ended without [DONE]"
