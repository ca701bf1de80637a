from __future__ import annotations

import asyncio

import pytest
from http_stand_in import HANG, MODEL, ScriptedOutputs, StandInTokenizerManager, client_for, piece, post

from tercet.errors import RequestError
from tercet.http.server.app import create_app
from tercet.ipc.messages import FinishReason

pytestmark = pytest.mark.anyio

DIED = "scheduler process died (killed by signal SIGKILL)"


class DeadChildTokenizerManager(StandInTokenizerManager):
    """What launch.py leaves behind when a child dies: a reason, and is_healthy() False."""

    def __init__(self, **options):
        super().__init__(**options)
        self.unhealthy_reason = DIED

    def is_healthy(self) -> bool:
        return self.unhealthy_reason is None


class GatedOutputs(ScriptedOutputs):
    """Scripted outputs that wait for ``gate`` before the first piece."""

    def __init__(self, rid: str, script: list, gate: asyncio.Event):
        super().__init__(rid, script)
        self.gate = gate

    async def __anext__(self):
        await self.gate.wait()
        return await super().__anext__()


class GatedTokenizerManager(StandInTokenizerManager):
    def __init__(self):
        super().__init__()
        self.gate = asyncio.Event()

    def generate(self, request):
        self.requests.append(request)
        self.outputs.append(GatedOutputs(request.rid, [piece("Hel", [5], FinishReason("length"), 1)], self.gate))
        return self.outputs[-1]


async def get(path, manager, **app_options):
    async with client_for(create_app(manager, **app_options)) as client:
        return await client.get(path)


# -- /health -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/health", "/health_generate"])
async def test_a_draining_server_is_not_healthy(path):
    manager = StandInTokenizerManager()
    manager.is_draining = True
    response = await get(path, manager)
    assert response.status_code == 503
    assert response.json() == {"status": "unhealthy", "reason": "the server is shutting down"}
    assert manager.requests == []  # no probe generation on the way down


async def test_health_is_cheap():
    manager = StandInTokenizerManager()
    response = await get("/health", manager)
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert manager.requests == []


async def test_health_names_the_dead_child():
    response = await get("/health", DeadChildTokenizerManager())
    assert response.status_code == 503
    assert response.json() == {"status": "unhealthy", "reason": DIED}


# -- /health_generate ----------------------------------------------------------------


async def test_health_generate_runs_one_greedy_token():
    manager = StandInTokenizerManager()
    response = await get("/health_generate", manager)
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    [request] = manager.requests
    assert request.sampling_params.max_new_tokens == 1 and request.sampling_params.temperature == 0
    assert request.rid.startswith("health-") and not request.stream and request.text
    assert manager.outputs[0].aclose_calls >= 1


async def test_health_generate_timeout_aborts_its_probe():
    manager = StandInTokenizerManager(script=[HANG])
    response = await get("/health_generate", manager, health_generate_timeout=0.05)
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unhealthy" and "did not finish within 0.05 s" in body["reason"]
    # Closing the iterator is what aborts the request in the scheduler.
    assert manager.outputs[0].aclose_calls >= 1


async def test_concurrent_probes_share_one_generation():
    manager = GatedTokenizerManager()
    app = create_app(manager)
    probe = app.state.health_generate_probe
    callers = 0
    check = probe.check

    async def counting_check():
        nonlocal callers
        callers += 1
        return await check()

    probe.check = counting_check
    async with client_for(app) as client:
        both = asyncio.gather(client.get("/health_generate"), client.get("/health_generate"))
        for _ in range(1000):  # both callers inside check(), the probe started
            if callers == 2 and manager.requests:
                break
            await asyncio.sleep(0)
        assert callers == 2
        manager.gate.set()
        responses = await both
        assert [r.status_code for r in responses] == [200, 200]
        assert len(manager.requests) == 1
        assert manager.outputs[0].aclose_calls >= 1
        # The probe finished: the next caller starts a new one.
        assert (await client.get("/health_generate")).status_code == 200
        assert len(manager.requests) == 2


async def test_a_probe_survives_a_caller_that_leaves():
    manager = GatedTokenizerManager()
    app = create_app(manager)
    probe = app.state.health_generate_probe
    leaving = asyncio.ensure_future(probe.check())
    staying = asyncio.ensure_future(probe.check())
    for _ in range(1000):
        if manager.requests:
            break
        await asyncio.sleep(0)
    leaving.cancel()
    manager.gate.set()
    assert await staying is None
    assert len(manager.requests) == 1


async def test_health_generate_when_refused_or_aborted():
    refused = StandInTokenizerManager(script=[RequestError("the server already holds 3 requests", status_code=503)])
    response = await get("/health_generate", refused)
    assert response.status_code == 503 and "already holds 3 requests" in response.json()["reason"]
    aborted = StandInTokenizerManager(script=[piece("", [], FinishReason("abort", message="flushed"))])
    response = await get("/health_generate", aborted)
    assert response.status_code == 503 and "flushed" in response.json()["reason"]
    assert aborted.outputs[0].aclose_calls >= 1


async def test_health_generate_with_a_dead_child_does_not_generate():
    manager = DeadChildTokenizerManager()
    response = await get("/health_generate", manager)
    assert response.status_code == 503
    assert response.json() == {"status": "unhealthy", "reason": DIED}
    assert manager.requests == []


async def test_health_endpoints_need_no_api_key():
    manager = StandInTokenizerManager()
    for path in ("/health", "/health_generate"):
        assert (await get(path, manager, api_key="secret")).status_code == 200
    assert (await post({"text": "Say"}, "/generate", manager, api_key="secret")).status_code == 401


# -- generation while unhealthy, and overload ---------------------------------------------


@pytest.mark.parametrize(
    "path, body",
    [
        ("/generate", {"text": "Say"}),
        ("/v1/completions", {"model": MODEL, "prompt": "Say"}),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
    ],
)
async def test_generation_with_a_dead_child_is_refused(path, body):
    manager = DeadChildTokenizerManager()
    response = await post(body, path, manager)
    assert response.status_code == 503
    assert DIED in response.json()["error"]["message"]
    assert "retry-after" not in response.headers
    assert manager.requests == []


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "path, body",
    [("/generate", {"text": "Say"}), ("/v1/completions", {"model": MODEL, "prompt": "Say"})],
)
async def test_overload_503_says_when_to_retry(path, body, stream):
    overloaded = RequestError(
        "the server already holds 2 requests (scheduler.max_running_requests + "
        "scheduler.max_queued_requests); retry later",
        status_code=503,
    )
    response = await post({**body, "stream": stream}, path, StandInTokenizerManager(script=[overloaded]))
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert "max_queued_requests" in response.json()["error"]["message"]


async def test_other_errors_have_no_retry_after():
    response = await post({"text": "Say"}, "/generate", StandInTokenizerManager(script=[RequestError("bad")]))
    assert response.status_code == 400 and "retry-after" not in response.headers
