"""Bad inputs against a real server: each one a 4xx in OpenAI's error shape, none of them
a crash, a 5xx or a slot held afterwards.

One row per (route, bad body); a new field gets its bad values by adding rows. Bodies
are sent as JSON text written by ``json.dumps``, which spells a lone surrogate as JSON's
``"\\ud800"`` (httpx's ``json=`` refuses to encode one), or as raw bytes where even that
cannot express the body (100,000 levels of nesting).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import httpx
import pytest

from tercet.config import ServerConfig
from tercet.testing import TINY_SETTINGS

SURROGATE = "\ud800"  # what JSON's "\ud800" decodes to: UTF-8 (and so msgpack) cannot encode it
DEEP = 100_000
TIMEOUT = 60
ERROR_KEYS = {"message", "type", "param", "code"}
JSON_TYPE = {"content-type": "application/json"}  # as every JSON client sends (a body without it is a 415)
MAX_PROMPTS = ServerConfig().max_prompts_per_request  # the default the servers here run with


@dataclass(frozen=True)
class Case:
    route: str
    body: dict | bytes
    param: str | None  # what the error's param must name; None where no parameter is to blame
    status: int = 400

    @property
    def content(self) -> bytes:
        return self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()

    def __str__(self) -> str:
        shown = self.content[:120].decode(errors="replace")
        return f"{self.route} {shown}{'...' if len(self.content) > 120 else ''}"


def completion(param, stream=False, **fields) -> Case:
    return Case("/v1/completions", {"prompt": "Hi", "max_tokens": 2, "stream": stream, **fields}, param)


def chat(param, stream=False, **fields) -> Case:
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stream": stream, **fields}
    return Case("/v1/chat/completions", body, param)


def generate(param, stream=False, sampling=None, **fields) -> Case:
    body = {"text": "Hi", "stream": stream, "sampling_params": {"max_new_tokens": 2, **(sampling or {})}, **fields}
    return Case("/generate", body, param)


def sampling_everywhere(name: str, value, **others) -> list[Case]:
    """Sampling field ``name`` set to ``value`` on every generation route, streaming and not."""
    return [
        case
        for stream in (False, True)
        for case in (
            completion(name, stream, **{name: value}, **others),
            chat(name, stream, **{name: value}, **others),
            generate(f"sampling_params.{name}", stream, sampling={name: value, **others}),
        )
    ]


def top_level_everywhere(name: str, value) -> list[Case]:
    """Top-level field ``name`` set to ``value`` on every generation route, streaming and not."""
    return [
        make(name, stream, **{name: value}) for stream in (False, True) for make in (completion, chat, generate)
    ]


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


GENERATION_ROUTES = ("/v1/completions", "/v1/chat/completions", "/generate")

CASES = [
    # past int64 the scheduler's top-k tensor overflows; past 64 bits msgpack cannot encode it
    *sampling_everywhere("top_k", 1 << 63),
    *sampling_everywhere("top_k", 1 << 63, temperature=1),
    *sampling_everywhere("top_k", 1 << 64),
    *sampling_everywhere("top_k", 1 << 64, temperature=1),
    *sampling_everywhere("top_k", 10**400, temperature=1),
    *sampling_everywhere("stop", [SURROGATE]),
    *sampling_everywhere("stop", "ok" + SURROGATE),
    *sampling_everywhere("stop_token_ids", [1 << 64]),
    *sampling_everywhere("seed", 1 << 64),
    *sampling_everywhere("n", 1 << 63),
    *sampling_everywhere("min_p", 10**400),
    *sampling_everywhere("logit_bias", {"1" * 5000: 1}),  # past Python's int-from-string digit limit
    *sampling_everywhere("logit_bias", {"1": 10**400}),
    *top_level_everywhere("user", SURROGATE),
    *top_level_everywhere("priority", 1 << 63),
    completion("max_tokens", max_tokens=1 << 63),
    chat("max_completion_tokens", max_completion_tokens=1 << 64),
    generate("sampling_params.max_new_tokens", sampling={"max_new_tokens": 1 << 63}),
    completion("model", model=SURROGATE),
    chat("model", model=SURROGATE, stream=True),
    completion("prompt", prompt=SURROGATE),
    completion("prompt", prompt=["a" + SURROGATE]),
    completion("prompt", prompt=[1 << 64]),
    completion("prompt", prompt=[[1, 1 << 63]], stream=True),
    # Lists of prompts: the list's shape names the field, one bad prompt names itself.
    completion("prompt", prompt=[]),
    completion("prompt", prompt=["a", [1]], stream=True),
    completion("prompt", prompt=[[1], "a"]),
    completion("prompt[1]", prompt=["a", ""]),  # as a single "" is refused: it tokenizes to nothing
    completion("prompt[1]", prompt=["a", "b" + SURROGATE]),
    completion("prompt[1]", prompt=[[1], []]),
    completion("prompt[2]", prompt=[[1], [2], [1 << 64]], stream=True),
    completion("prompt[2]", prompt=["a", "b", "hi " * 2000]),  # too long for the context
    completion("prompt[1]", prompt=[[1, 2], [1] * 2000], stream=True),
    completion("prompt", prompt=["a"] * (MAX_PROMPTS + 1)),
    completion("prompt", prompt=["a"] * (MAX_PROMPTS // 2 + 1), n=2, stream=True),  # prompts × n over the cap
    completion("logprobs", logprobs=1 << 64),
    completion("best_of", best_of=1 << 64),
    chat("messages[0].content", messages=[{"role": "user", "content": SURROGATE}]),
    chat("messages[0].content[0].text", messages=[{"role": "user", "content": [{"type": "text", "text": SURROGATE}]}]),
    chat("messages[1].content", messages=[{"role": "system", "content": "Brief"}, {"role": "user", "content": None}]),
    chat("messages[0].role", messages=[{"role": SURROGATE, "content": "Hi"}]),
    chat("top_logprobs", logprobs=True, top_logprobs=1 << 64),
    generate("text", text=SURROGATE),
    generate("text", text=SURROGATE, stream=True),
    generate("input_ids", text=None, input_ids=[1 << 64]),
    generate("text", text=[]),
    generate("text", text=["a", 1], stream=True),
    generate("text[1]", text=["a", ""]),
    generate("text[1]", text=["a", "hi " * 2000], stream=True),
    generate("text", text=["a"] * (MAX_PROMPTS + 1)),
    generate("input_ids[1]", text=None, input_ids=[[1], [1 << 64]]),
    generate("input_ids[1]", text=None, input_ids=[[1], [1] * 2000]),
    generate("input_ids", text=None, input_ids=[[1], 2]),
    generate("rid", rid=SURROGATE),
    generate("rid", rid=SURROGATE, stream=True),
    # The param quotes the key: it comes back with the surrogate escaped.
    generate("sampling_params.\\ud800", sampling={SURROGATE: 1}),
    generate("logprob_start_len", return_logprob=True, logprob_start_len=1 << 64),
    generate("top_logprobs_num", return_logprob=True, top_logprobs_num=1 << 64),
    # A top-level flag (or logprob_start_len) that would override it does not hide a bad value.
    generate("sampling_params.return_prompt_logprob", sampling={"return_prompt_logprob": [{}]},
             return_logprob=True, logprob_start_len=0),
    generate("sampling_params.return_logprob", sampling={"return_logprob": "yes"}, return_logprob=True),
    *[Case(route, nested(DEEP), None) for route in (*GENERATION_ROUTES, "/flush_cache", "/abort_request")],
    *[Case(route, b'{"x": ' + nested(DEEP) + b"}", None) for route in GENERATION_ROUTES],
    Case("/flush_cache", {"timeout": int("9" * 400)}, "timeout"),
    Case("/flush_cache", {"timeout": 3601}, "timeout"),
    Case("/flush_cache", {"timeout": -1}, "timeout"),
    Case("/flush_cache", {"timeout": "1"}, "timeout"),
    Case("/abort_request", {}, "rid"),
    Case("/abort_request", {"abort_all": False}, "rid"),
    Case("/abort_request", {"rid": "0", "abort_all": {}}, "abort_all"),
    Case("/abort_request", {"abort_all": "true"}, "abort_all"),
    Case("/abort_request", {"rid": 5}, "rid"),
    Case("/abort_request", {"rid": SURROGATE}, "rid"),
    # Refused before generation is paused or anything is loaded.
    Case("/update_weights_from_disk", {"model_path": "/nowhere", "timeout": int("9" * 400)}, "timeout"),
    Case("/update_weights_from_disk", {"model_path": SURROGATE}, "model_path"),
]

# Odd but valid bodies, where the document and the parsers once disagreed: served
# (their status and param are not used).
ACCEPTED = [
    generate(None, text=None, input_ids=[1, 2, 3]),
    generate(None, input_ids=None),
    completion(None, stream_options={"include_usage": True}),
    completion(None, prompt=["a"] * MAX_PROMPTS),  # at the cap
    completion(None, prompt=[[1], [2, 3]], stream=True),
    generate(None, text=["a", "b"], stream=True),
    chat(None, messages=[{"role": "assistant", "content": None}, {"role": "user", "content": "Hi"}]),
    chat(None, stream=True, seed=(1 << 64) - 1, temperature=1),
    Case("/abort_request", {"rid": "no-such-request", "abort_all": None}, None),
    Case("/flush_cache", {"timeout": None}, None),
]


@pytest.fixture(scope="module")
def server(start_server, tiny_llama_dir):
    # Its own server: a regression that kills it must not take the session's tiny_server along.
    return start_server(tiny_llama_dir, TINY_SETTINGS)


@pytest.fixture(scope="module")
def vocab_size(tiny_llama_dir) -> int:
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(tiny_llama_dir))


def assert_openai_error(response: httpx.Response, case: Case) -> None:
    described = f"{case} -> {response.status_code} {response.text[:300]}"
    assert 400 <= response.status_code < 500 and response.status_code == case.status, described
    assert response.headers["content-type"] == "application/json", described
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, described
    error = body["error"]
    assert error["type"] == "invalid_request_error" and isinstance(error["message"], str), described
    assert error["param"] == case.param, described


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_bad_input_is_a_4xx_in_openai_shape(server, case):
    response = httpx.post(server.base_url + case.route, content=case.content, headers=JSON_TYPE, timeout=TIMEOUT)
    assert_openai_error(response, case)


@pytest.mark.parametrize("case", ACCEPTED, ids=str)
def test_an_odd_but_valid_input_is_served(server, case):
    response = httpx.post(server.base_url + case.route, content=case.content, headers=JSON_TYPE, timeout=TIMEOUT)
    assert response.status_code == 200, f"{case} -> {response.status_code} {response.text[:300]}"


def test_top_k_up_to_the_vocabulary_is_served(server, vocab_size):
    body = {"prompt": "Hi", "max_tokens": 2, "temperature": 1, "top_k": vocab_size}
    assert httpx.post(server.base_url + "/v1/completions", json=body, timeout=TIMEOUT).status_code == 200
    body["top_k"] = vocab_size + 1
    refused = httpx.post(server.base_url + "/v1/completions", json=body, timeout=TIMEOUT)
    assert_openai_error(refused, completion("top_k"))


def assert_unharmed(base_url: str) -> None:
    """The server serves a normal request, and nothing a refused request started is still held."""
    served = httpx.post(base_url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=TIMEOUT)
    assert served.status_code == 200, served.text
    deadline = time.monotonic() + 10  # a finished request's state goes once its response is out
    while True:
        in_flight = httpx.get(base_url + "/get_server_info", timeout=TIMEOUT).json()["requests_in_flight_per_rank"]
        if not any(in_flight) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not any(in_flight), f"requests still held after the bad ones: {in_flight}"


def test_after_the_table_the_server_is_unharmed(server):
    assert server.process.poll() is None, server.log()
    assert_unharmed(server.base_url)


# The requests that once answered 500 and kept their place for good.
SLOT_HOLDERS = [
    completion("stop", stop=[SURROGATE]),
    completion("user", user=SURROGATE),
    generate("rid", rid=SURROGATE),
    completion("top_k", top_k=1 << 64),
]
NUM_BAD_REQUESTS = 1000
CONCURRENCY = 50


async def send_all(base_url: str, cases: list[Case]) -> list[tuple[Case, httpx.Response]]:
    limit = asyncio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(base_url=base_url, timeout=TIMEOUT) as client:

        async def send(case: Case):
            async with limit:
                return case, await client.post(case.route, content=case.content, headers=JSON_TYPE)

        return await asyncio.gather(*(send(case) for case in cases))


def test_a_thousand_bad_requests_hold_no_slot(server, record_property):
    cases = [SLOT_HOLDERS[i % len(SLOT_HOLDERS)] for i in range(NUM_BAD_REQUESTS)]
    started = time.monotonic()
    answers = asyncio.run(send_all(server.base_url, cases))
    elapsed = time.monotonic() - started
    record_property("seconds_for_1000_bad_requests", round(elapsed, 2))
    print(f"{NUM_BAD_REQUESTS} bad requests, {CONCURRENCY} at a time: {elapsed:.1f} s")
    for case, response in answers:
        assert_openai_error(response, case)
    assert_unharmed(server.base_url)
    assert elapsed < 60, f"{NUM_BAD_REQUESTS} refusals took {elapsed:.1f} s"
