"""Reasoning apart from the answer on a real server, with the real default model.

SmolLM2 does not reason; a regex makes it write ``<think>…</think>`` and then an
answer, so what is tested is the server's split, not what a 135M model chooses.
"""

import re

import openai
import pytest

pytestmark = pytest.mark.real_model

SHAPE = r"<think>[a-z ]{1,20}</think>[A-Z][a-z]{1,10}"
ASK = [{"role": "user", "content": "What is the capital of France? Think first."}]


@pytest.fixture(scope="module")
def client(start_server):
    server = start_server(None, ["reasoning.parser=think", "cache.max_total_tokens=4096",
                                 "scheduler.max_running_requests=4"])
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def ask(client, **fields):
    return client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=ASK, max_tokens=60, temperature=0,
                                          extra_body={"regex": SHAPE, **fields.pop("extra_body", {})}, **fields)


def test_reasoning_content_and_content_are_apart(client):
    message = ask(client).choices[0].message
    assert re.fullmatch(r"[a-z ]{1,20}", message.reasoning_content), message
    assert re.fullmatch(r"[A-Z][a-z]{1,10}", message.content), message


def test_a_stream_splits_the_same_way_and_never_sends_a_tag_as_content(client):
    whole = ask(client).choices[0].message
    reasoning, content = "", ""
    for chunk in ask(client, stream=True):
        for choice in chunk.choices:
            delta = choice.delta.model_dump()
            reasoning += delta.get("reasoning_content") or ""
            assert "<" not in (delta.get("content") or "")
            content += delta.get("content") or ""
    assert (reasoning, content) == (whole.reasoning_content, whole.content)


def test_separate_reasoning_false_passes_the_output_through(client):
    message = ask(client, extra_body={"separate_reasoning": False}).choices[0].message
    assert re.fullmatch(SHAPE, message.content)
    assert getattr(message, "reasoning_content", None) is None
