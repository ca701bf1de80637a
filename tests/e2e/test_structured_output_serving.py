"""Structured output on a real server (tiny random model): JSON Schemas, JSON mode, regular expressions.

A random model follows no instruction, so whatever it writes is the grammar's
doing. It may also wander until ``max_tokens`` (inside a long string, say), and
a cut-off output is only a prefix of a match: validity is asserted for
``finish_reason == "stop"``, and every test also asserts that some of its
requests stopped, so none can pass without checking an output. The schemas
keep the outputs short (enums, a ``maxLength``, a bounded integer) to make that so.
"""

from __future__ import annotations

import json
import re
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import httpx
import jsonschema  # installed with openapi-spec-validator, of the test extra
import openai
import pydantic
import pytest

TIMEOUT = 120
MAX_TOKENS = 200
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 100},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
COLOUR = {
    "type": "object",
    "properties": {"colour": {"enum": ["red", "green", "blue"]}},
    "required": ["colour"],
    "additionalProperties": False,
}
PROMPTS = ["Describe a person.", "Who are you?", "Tell me about your friend.", "Write JSON."]
SEEDS = range(6)


class Colour(pydantic.BaseModel):
    colour: Literal["red", "green", "blue"]


@pytest.fixture(scope="module")
def client(tiny_server):
    return openai.OpenAI(base_url=tiny_server.base_url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def model_name(client):
    return client.models.list().data[0].id


@pytest.fixture(scope="module")
def post(tiny_server):
    def post(path: str, body: dict) -> httpx.Response:
        return httpx.post(tiny_server.base_url + path, json=body, timeout=TIMEOUT)

    return post


def schema_format(schema: dict, name: str = "answer") -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def chat_body(content: str, **fields) -> dict:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": MAX_TOKENS, **fields}


def check_valid(content: str, schema: dict) -> dict:
    value = json.loads(content)
    jsonschema.validate(value, schema)
    return value


def checked_choices(choices, schema: dict) -> int:
    """Validate every choice that stopped; return how many did."""
    stopped = 0
    for choice in choices:
        if choice["finish_reason"] == "stop":
            check_valid(choice["message"]["content"], schema)
            stopped += 1
        else:
            assert choice["finish_reason"] == "length", choice
    return stopped


@pytest.mark.parametrize("temperature", [0, 1])
def test_chat_json_schema_output_validates(post, temperature):
    stopped = 0
    for prompt in PROMPTS:
        for seed in SEEDS if temperature else [None]:
            body = chat_body(prompt, temperature=temperature, seed=seed, response_format=schema_format(PERSON))
            response = post("/v1/chat/completions", body)
            assert response.status_code == 200, response.text
            stopped += checked_choices(response.json()["choices"], PERSON)
    assert stopped, "no request finished within max_tokens: nothing was checked"


def test_sdk_parse_gives_the_pydantic_object(client, model_name):
    parsed = []
    for seed in SEEDS:
        try:
            reply = client.chat.completions.parse(
                model=model_name,
                messages=[{"role": "user", "content": "Pick a colour"}],
                response_format=Colour,
                max_tokens=MAX_TOKENS,
                temperature=1,
                seed=seed,
            )
        except openai.LengthFinishReasonError:
            continue  # cut off at max_tokens: the SDK refuses to parse a prefix
        choice = reply.choices[0]
        assert choice.finish_reason == "stop"
        assert isinstance(choice.message.parsed, Colour), choice.message
        assert choice.message.parsed == Colour.model_validate_json(choice.message.content)
        parsed.append(choice.message.parsed.colour)
    assert parsed, "no request finished within max_tokens"


def test_streamed_deltas_join_into_valid_json(client, model_name):
    stopped = 0
    for seed in SEEDS:
        stream = client.chat.completions.create(
            model=model_name,
            messages=[{"role": "user", "content": "Pick a colour"}],
            response_format=schema_format(COLOUR),
            max_tokens=MAX_TOKENS,
            temperature=1,
            seed=seed,
            stream=True,
        )
        pieces, finish_reason = [], None
        for chunk in stream:
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
                finish_reason = choice.finish_reason or finish_reason
        if finish_reason == "stop":
            check_valid("".join(pieces), COLOUR)
            stopped += 1
    assert stopped, "no stream finished within max_tokens"


def test_json_object_gives_a_json_object(post):
    stopped = 0
    for seed in range(12):  # any object: most run on in a long string, about one in four closes early
        body = chat_body("Write JSON.", temperature=1, seed=seed, response_format={"type": "json_object"})
        response = post("/v1/chat/completions", body)
        assert response.status_code == 200, response.text
        choice = response.json()["choices"][0]
        if choice["finish_reason"] == "stop":
            assert isinstance(json.loads(choice["message"]["content"]), dict), choice
            stopped += 1
    assert stopped, "no request finished within max_tokens"


def is_digit(character: str) -> bool:
    # The backend's \d is any Unicode decimal digit, of a Unicode version that
    # may be newer than Python's: a code point Python has unassigned is taken.
    return unicodedata.category(character) in ("Nd", "Cn")


@pytest.mark.parametrize("temperature", [0, 1])
@pytest.mark.parametrize(
    "regex, matches",
    [
        (r"[0-9]{3}-[0-9]{4}", lambda text: re.fullmatch(r"[0-9]{3}-[0-9]{4}", text)),
        (r"\d{3}-\d{4}", lambda text: len(text) == 8 and text[3] == "-" and all(map(is_digit, text[:3] + text[4:]))),
    ],
    ids=["ascii", "unicode"],
)
def test_generate_regex_output_matches(post, temperature, regex, matches):
    for seed in SEEDS:
        sampling_params = {"regex": regex, "max_new_tokens": 50, "temperature": temperature, "seed": seed}
        response = post("/generate", {"text": "Call me at", "sampling_params": sampling_params})
        assert response.status_code == 200, response.text
        answer = response.json()
        # Eight characters: no completion can run out of tokens first.
        assert answer["meta_info"]["finish_reason"]["type"] == "stop", answer
        assert matches(answer["text"]), answer


@pytest.mark.parametrize("json_schema", [json.dumps(COLOUR), COLOUR], ids=["text", "object"])
def test_generate_json_schema_as_sglang_sends_it(post, json_schema):
    stopped = 0
    for seed in SEEDS:
        sampling_params = {"json_schema": json_schema, "max_new_tokens": MAX_TOKENS, "temperature": 1, "seed": seed}
        answer = post("/generate", {"text": "Pick a colour:", "sampling_params": sampling_params}).json()
        if answer["meta_info"]["finish_reason"]["type"] == "stop":
            check_valid(answer["text"], COLOUR)
            stopped += 1
    assert stopped, "no request finished within max_tokens"


def test_completions_take_response_format_and_regex(post):
    body = {"prompt": "Pick a colour:", "max_tokens": MAX_TOKENS, "temperature": 0}
    regex = post("/v1/completions", {**body, "regex": "(yes|no)"}).json()["choices"][0]
    assert regex["finish_reason"] == "stop" and regex["text"] in ("yes", "no"), regex
    stopped = 0
    for seed in SEEDS:
        sampled = {"temperature": 1, "seed": seed, "response_format": schema_format(COLOUR)}
        choice = post("/v1/completions", {**body, **sampled}).json()["choices"][0]
        if choice["finish_reason"] == "stop":
            check_valid(choice["text"], COLOUR)
            stopped += 1
    assert stopped, "no request finished within max_tokens"


def test_a_schema_the_backend_cannot_compile_is_a_400_and_others_still_run(post):
    bad = chat_body("Hi", response_format=schema_format({"type": "nonsense"}))
    good = chat_body("Hi", temperature=0, max_tokens=4)
    with ThreadPoolExecutor(4) as pool:
        refused = [pool.submit(post, "/v1/chat/completions", bad) for _ in range(2)]
        served = [pool.submit(post, "/v1/chat/completions", good) for _ in range(2)]
        refused, served = [f.result() for f in refused], [f.result() for f in served]
    for response in refused:
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert "nonsense" in error["message"] and error["param"] == "response_format", response.text
    for response in served:
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["finish_reason"] == "length"
    # The same bad schema again (the backend may cache what it compiled): still a 400.
    assert post("/v1/chat/completions", bad).status_code == 400


@pytest.mark.parametrize(
    "body, param",
    [
        (chat_body("Hi", response_format={"type": "json_schema", "json_schema": {"schema": COLOUR}}),
         "response_format.json_schema.name"),
        (chat_body("Hi", response_format={"type": "xml"}), "response_format.type"),
        (chat_body("Hi", response_format={"type": "json_object"}, regex="a"), "regex"),
        (chat_body("Hi", tools=[{"type": "function", "function": {"name": "f"}}],
                   tool_choice={"type": "function", "function": {"name": "g"}}), "tool_choice.function.name"),
    ],
)
def test_bad_shapes_are_refused_before_compiling(post, body, param):
    response = post("/v1/chat/completions", body)
    assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text


def test_n_completions_each_follow_the_schema(post):
    stopped = 0
    for seed in SEEDS:
        body = chat_body("Pick a colour", temperature=1, seed=seed, n=2, response_format=schema_format(COLOUR))
        response = post("/v1/chat/completions", body)
        assert response.status_code == 200, response.text
        choices = response.json()["choices"]
        assert [choice["index"] for choice in choices] == [0, 1]
        stopped += checked_choices(choices, COLOUR)
    assert stopped >= 2, "too few completions finished within max_tokens"
