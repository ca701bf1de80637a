from __future__ import annotations

import asyncio
import json
import logging
import re

import httpx
import pytest
from http_stand_in import (
    HANG,
    MODEL,
    STREAMED,
    StandInTokenizerManager,
    client_for,
    piece,
    post,
    sse_events,
    with_routes,
)
from starlette.responses import JSONResponse

from tercet.errors import RequestError
from tercet.http.server.app import create_app
from tercet.http.server.hypercorn_server import serve_http
from tercet.ipc.messages import FinishReason

pytestmark = pytest.mark.anyio
JSON_TYPE = {"content-type": "application/json"}


# -- /v1/completions --------------------------------------------------------------


async def test_completion():
    manager = StandInTokenizerManager()
    response = await post({"model": MODEL, "prompt": "Say"}, manager=manager)
    assert response.status_code == 200
    body = response.json()
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion" and body["model"] == MODEL
    assert body["choices"] == [{"index": 0, "text": "Hello", "logprobs": None, "finish_reason": "length"}]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6, "prompt_tokens_details": {"cached_tokens": 0}}
    request = manager.requests[0]
    assert request.text == "Say" and request.sampling_params.max_new_tokens == 16 and not request.stream
    assert manager.outputs[0].aclose_calls >= 1


async def test_completion_stream():
    response = await post({"model": MODEL, "prompt": "Say", "stream": True})
    chunks = sse_events(response)
    assert [c["choices"][0]["text"] for c in chunks] == ["Hel", "lo", ""]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "stop"]
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("cmpl-")
    assert all(c["object"] == "text_completion" and "usage" not in c for c in chunks)


async def test_completion_stream_with_usage():
    body = {"model": MODEL, "prompt": "Say", "stream": True, "stream_options": {"include_usage": True}}
    chunks = sse_events(await post(body))
    assert [c["usage"] for c in chunks[:-1]] == [None, None, None]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 6


# -- /v1/chat/completions ---------------------------------------------------------


async def test_chat_completion():
    manager = StandInTokenizerManager()
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    response = await post({"model": MODEL, "messages": messages}, "/v1/chat/completions", manager)
    body = response.json()
    assert response.status_code == 200 and body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    assert body["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "Hello"}, "logprobs": None, "finish_reason": "length"}
    ]
    assert manager.templated == [[{"role": "user", "content": "hi"}]]
    request = manager.requests[0]
    assert request.input_ids == [1] * 4 and request.sampling_params.max_new_tokens == 64 - 4


async def test_chat_completion_stream():
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = sse_events(await post(body, "/v1/chat/completions"))
    assert [c["choices"][0]["delta"] for c in chunks[:-1]] == [
        {"role": "assistant", "content": ""},
        {"content": "Hel"},
        {"content": "lo"},
        {},
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None, None, None, "stop"]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6, "prompt_tokens_details": {"cached_tokens": 0}}


# -- models, health, errors -------------------------------------------------------


async def test_models():
    async with client_for(create_app(StandInTokenizerManager())) as client:
        body = (await client.get("/v1/models")).json()
    assert body["object"] == "list"
    [model] = body["data"]
    assert model["id"] == MODEL and model["object"] == "model" and model["owned_by"] == "tercet"
    assert isinstance(model["created"], int)


async def test_retrieving_the_served_model_gives_its_entry_in_the_list():
    async with client_for(create_app(StandInTokenizerManager())) as client:
        listed = (await client.get("/v1/models")).json()["data"][0]
        response = await client.get(f"/v1/models/{MODEL}")
    assert response.status_code == 200 and response.json() == listed


# Sent as is and percent-encoded (as the openai client sends it): the id arrives whole.
MODEL_IDS = [
    ("org/model", "/v1/models/org/model"),
    ("org/model", "/v1/models/org%2Fmodel"),
    ("org/sub/model-1.5B", "/v1/models/org%2Fsub%2Fmodel-1.5B"),
    ("my model ☕", "/v1/models/my%20model%20%E2%98%95"),
    ("50%2F50", "/v1/models/50%252F50"),  # decoded once only
]


@pytest.mark.parametrize("model, path", MODEL_IDS)
async def test_model_ids_with_slashes_and_escapes(model, path):
    manager = StandInTokenizerManager()
    manager.served_model_name = model
    async with client_for(create_app(manager)) as client:
        response = await client.get(path)
    assert response.status_code == 200, response.text
    assert response.json()["id"] == model


@pytest.mark.parametrize("path", ["/v1/models/gpt-4", f"/v1/models/{MODEL}/extra", f"/v1/models/{MODEL}%20", "/v1/models/"])
async def test_another_model_is_an_openai_404_naming_the_served_one(path):
    async with client_for(create_app(StandInTokenizerManager())) as client:
        response = await client.get(path)
    assert response.status_code == 404
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "model", "model_not_found")
    assert MODEL in error["message"]


async def test_models_answer_while_a_child_is_down():
    # Only the configuration is needed: no 503 as the generation routes give.
    async with client_for(create_app(StandInTokenizerManager(healthy=False))) as client:
        listed = await client.get("/v1/models")
        retrieved = await client.get(f"/v1/models/{MODEL}")
        generated = await client.post("/v1/completions", json={"prompt": "Say"})
    assert listed.status_code == retrieved.status_code == 200
    assert generated.status_code == 503


@pytest.mark.parametrize("healthy, status", [(True, 200), (False, 503)])
async def test_health(healthy, status):
    async with client_for(create_app(StandInTokenizerManager(healthy=healthy))) as client:
        response = await client.get("/health")
    assert response.status_code == status
    assert response.json()["status"] == ("ok" if healthy else "unhealthy")


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b"", b'{"prompt": "x", "temperature": NaN}'])
async def test_malformed_bodies_are_400(body):
    response = await post(body)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_unknown_model_is_404():
    response = await post({"model": "gpt-4", "prompt": "x"})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "model_not_found" and error["param"] == "model"


async def test_bad_temperature_names_the_param():
    response = await post({"model": MODEL, "prompt": "x", "temperature": -0.5})
    error = response.json()["error"]
    assert response.status_code == 400 and "temperature" in error["message"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "temperature", None)


async def test_unknown_path_is_an_openai_style_404():
    async with client_for(create_app(StandInTokenizerManager())) as client:
        response = await client.get("/v1/nothing")
    assert response.status_code == 404 and "message" in response.json()["error"]


async def test_api_key():
    app = create_app(StandInTokenizerManager(), api_key="sekret")
    async with client_for(app) as client:
        missing = await client.get("/v1/models")
        wrong = await client.get("/v1/models", headers={"Authorization": "Bearer nope"})
        right = await client.get("/v1/models", headers={"Authorization": "Bearer sekret"})
        health = await client.get("/health")
        # Retrieving a model, known or not, needs the key too.
        one_missing = await client.get(f"/v1/models/{MODEL}")
        other_missing = await client.get("/v1/models/other")
        one_right = await client.get(f"/v1/models/{MODEL}", headers={"Authorization": "Bearer sekret"})
    assert missing.status_code == wrong.status_code == one_missing.status_code == other_missing.status_code == 401
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert right.status_code == 200 and health.status_code == 200 and one_right.status_code == 200


async def test_a_body_over_the_limit_is_413_and_the_server_keeps_serving():
    app = create_app(StandInTokenizerManager(), max_request_body_bytes=1024)
    oversized = json.dumps({"model": MODEL, "prompt": "x" * 2000}).encode()

    async def in_pieces():  # no Content-Length: sent chunked, counted as it arrives
        for start in range(0, len(oversized), 256):
            yield oversized[start:start + 256]

    async with client_for(app) as client:
        declared = await client.post("/v1/completions", content=oversized, headers=JSON_TYPE)
        chunked = await client.post("/v1/completions", content=in_pieces(), headers=JSON_TYPE)
        fits = await client.post("/v1/completions", json={"model": MODEL, "prompt": "Say"})
    for refused in (declared, chunked):
        assert refused.status_code == 413
        assert "server.max_request_body_bytes" in refused.json()["error"]["message"]
    assert "content-length" not in chunked.request.headers
    assert fits.status_code == 200


@pytest.mark.parametrize("stream", [False, True])
async def test_refused_request_gets_its_status(stream):
    refused = piece("", [], FinishReason("abort", message="prompt can never fit", status_code=400))
    manager = StandInTokenizerManager(script=[refused])
    response = await post({"model": MODEL, "prompt": "x", "stream": stream}, manager=manager)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "prompt can never fit"
    assert manager.outputs[0].aclose_calls >= 1


async def test_abort_without_status_is_a_finish_reason():
    manager = StandInTokenizerManager(script=[piece("Hi", [5], FinishReason("abort", message="server stopping"))])
    response = await post({"model": MODEL, "prompt": "x"}, manager=manager)
    assert response.status_code == 200 and response.json()["choices"][0]["finish_reason"] == "abort"


async def test_request_error_from_generate_is_400():
    manager = StandInTokenizerManager(script=[RequestError("prompt is too long", "prompt")])
    response = await post({"model": MODEL, "prompt": "x" * 10, "stream": True}, manager=manager)
    assert response.status_code == 400 and response.json()["error"]["param"] == "prompt"


async def test_unexpected_error_is_500_and_the_server_keeps_serving(caplog):
    manager = StandInTokenizerManager(script=[ValueError("boom")])
    async with client_for(create_app(manager)) as client:
        failed = await client.post("/v1/completions", json={"prompt": "x"})
        manager.script = None
        served = await client.post("/v1/completions", json={"prompt": "x"})
    assert failed.status_code == 500 and failed.json()["error"]["type"] == "internal_error"
    assert "boom" in caplog.text
    assert served.status_code == 200


DEEP = 100_000


@pytest.mark.parametrize(
    "path, body, param",
    [
        ("/v1/completions", b'{"prompt": "x", "nested": ' + b"[" * DEEP + b"]" * DEEP + b"}", None),
        ("/generate", b"[" * DEEP + b"]" * DEEP, None),
        ("/v1/completions", b'{"prompt": "x", "logit_bias": {"' + b"1" * 5000 + b'": 1}}', "logit_bias"),
        ("/v1/completions", b'{"prompt": "\\ud800"}', "prompt"),
        ("/generate", b'{"text": "\\ud800"}', "text"),
        ("/v1/completions", b'{"prompt": "x", "model": "\\ud800"}', "model"),
        # The param quotes the key: the surrogate comes back escaped.
        ("/generate", b'{"text": "x", "sampling_params": {"\\ud800": 1}}', "sampling_params.\\ud800"),
    ],
    ids=["deep-object", "deep-array", "long-logit-bias-key", "prompt-surrogate", "text-surrogate",
         "model-surrogate", "key-surrogate"],
)
async def test_inputs_that_once_gave_500_are_400_in_json(path, body, param):
    response = await post(body, path)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param


async def test_an_error_quoting_a_lone_surrogate_is_still_json():
    app = create_app(StandInTokenizerManager(), routes=with_routes(("/quote", _quote_the_body, ["POST"])))
    async with client_for(app) as client:
        response = await client.post("/quote", content=b'{"name": "a\\ud800b"}', headers=JSON_TYPE)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": "no such thing: a\\ud800b",
        "type": "invalid_request_error",
        "param": "name.a\\ud800b",
        "code": None,
    }


async def _quote_the_body(request, tokenizer_manager):
    name = json.loads(await request.body())["name"]
    raise RequestError(f"no such thing: {name}", f"name.{name}")


class UnsendableResponse(JSONResponse):
    async def __call__(self, scope, receive, send):
        raise RuntimeError("the response could not be sent")


async def test_a_failure_past_the_handler_is_a_json_500():
    async def endpoint(request, tokenizer_manager):
        return UnsendableResponse({})

    app = create_app(StandInTokenizerManager(), routes=with_routes(("/unsendable", endpoint, ["GET"])))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        response = await client.get("/unsendable")
    assert response.status_code == 500 and response.headers["content-type"] == "application/json"
    assert response.json()["error"]["type"] == "internal_error"


async def test_error_in_mid_stream_becomes_an_error_event():
    manager = StandInTokenizerManager(script=[STREAMED[0], RuntimeError("lost the scheduler")])
    response = await post({"model": MODEL, "prompt": "x", "stream": True}, manager=manager)
    chunks = sse_events(response)
    assert chunks[0]["choices"][0]["text"] == "Hel"
    assert chunks[-1]["error"]["type"] == "internal_error"


async def test_extra_routes_get_the_tokenizer_manager_and_need_the_key():
    async def echo_model(request, tokenizer_manager):
        return JSONResponse({"model": tokenizer_manager.served_model_name})

    app = create_app(StandInTokenizerManager(), api_key="k", routes=with_routes(("/plugin/echo", echo_model, ["GET"])))
    async with client_for(app) as client:
        assert (await client.get("/plugin/echo")).status_code == 401
        response = await client.get("/plugin/echo", headers={"Authorization": "Bearer k"})
    assert response.json() == {"model": MODEL}


async def test_the_official_openai_client_reads_our_schema():
    openai = pytest.importorskip("openai")
    http_client = client_for(create_app(StandInTokenizerManager()))
    client = openai.AsyncOpenAI(api_key="unused", base_url="http://localhost/v1", http_client=http_client)
    messages = [{"role": "user", "content": "hi"}]
    reply = await client.chat.completions.create(model=MODEL, messages=messages)
    assert reply.choices[0].message.content == "Hello" and reply.usage.total_tokens == 6
    stream = await client.chat.completions.create(model=MODEL, messages=messages, stream=True)
    assert "".join([chunk.choices[0].delta.content or "" async for chunk in stream]) == "Hello"
    with pytest.raises(openai.NotFoundError):
        await client.completions.create(model="other", prompt="x")


# -- client disconnects -----------------------------------------------------------


async def run_until_client_leaves(app, path: str, body: dict, leave_after_first_chunk: bool) -> list[dict]:
    """Drive the ASGI app directly: httpx's transport buffers whole responses,
    so it cannot close a stream early."""
    sent: list[dict] = []
    first_chunk = asyncio.Event()
    request_messages = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]

    async def receive():
        if request_messages:
            return request_messages.pop()
        if leave_after_first_chunk:
            await first_chunk.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            first_chunk.set()

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http"}
    scope |= {"path": path, "raw_path": path.encode(), "query_string": b"", "root_path": ""}
    scope |= {"headers": [(b"content-type", b"application/json")], "client": None, "server": ("127.0.0.1", 30000)}
    await asyncio.wait_for(app(scope, receive, send), timeout=5)
    return sent


PROMPTS_BY_PATH = {
    "/v1/completions": {"prompt": "x"},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}]},
    "/generate": {"text": "x"},
}


@pytest.mark.parametrize(
    "path, stream, script, leave_after_first_chunk",
    [
        ("/v1/completions", True, [STREAMED[0], HANG], True),
        ("/v1/chat/completions", True, [STREAMED[0], HANG], True),
        ("/generate", True, [STREAMED[0], HANG], True),
        ("/v1/completions", True, [HANG], False),
        ("/v1/completions", False, [STREAMED[0], HANG], False),
    ],
)
async def test_client_leaving_closes_the_generation(path, stream, script, leave_after_first_chunk):
    manager = StandInTokenizerManager(script=script)
    body = {**PROMPTS_BY_PATH[path], "stream": stream}
    sent = await run_until_client_leaves(create_app(manager), path, body, leave_after_first_chunk)
    assert manager.outputs[0].aclose_calls >= 1
    if leave_after_first_chunk:
        assert sent[0]["status"] == 200 and b"Hel" in b"".join(m.get("body", b"") for m in sent)


# -- serve_http -------------------------------------------------------------------


async def test_serve_http_listens_logs_and_stops(caplog):
    caplog.set_level(logging.INFO, logger="tercet.http.server.hypercorn_server")
    listening = asyncio.Event()
    stop = asyncio.Event()
    server = asyncio.ensure_future(
        serve_http(create_app(StandInTokenizerManager()), "127.0.0.1", 0, stop.wait, on_listening=listening.set)
    )
    await asyncio.wait_for(listening.wait(), 5)
    port = int(re.search(r"tercet listening on http://127\.0\.0\.1:(\d+)", caplog.text).group(1))
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{port}/health")
    assert response.json() == {"status": "ok"}
    stop.set()
    await asyncio.wait_for(server, 10)


async def test_the_openai_client_retrieves_a_model_with_slashes_over_real_http(caplog):
    # uvicorn, not the ASGI test transport, decodes the path here: "org%2Fsub%20model" arrives whole.
    import openai

    caplog.set_level(logging.INFO, logger="tercet.http.server.hypercorn_server")
    manager = StandInTokenizerManager()
    manager.served_model_name = "org/sub model"
    listening = asyncio.Event()
    stop = asyncio.Event()
    server = asyncio.ensure_future(serve_http(create_app(manager), "127.0.0.1", 0, stop.wait, on_listening=listening.set))
    await asyncio.wait_for(listening.wait(), 5)
    port = int(re.search(r"tercet listening on http://127\.0\.0\.1:(\d+)", caplog.text).group(1))
    try:
        async with openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0) as client:
            model = await client.models.retrieve("org/sub model")
            assert (model.id, model.object, model.owned_by) == ("org/sub model", "model", "tercet")
            with pytest.raises(openai.NotFoundError) as refused:
                await client.models.retrieve("org/other")
            assert refused.value.code == "model_not_found" and "org/sub model" in refused.value.message
    finally:
        stop.set()
        await asyncio.wait_for(server, 10)
