"""Health endpoints: ``GET /health`` and ``GET /health_generate``.

``/health`` is cheap: it only asks the TokenizerManager whether a child process
has died, with no round trip to the scheduler. ``/health_generate`` proves the
whole pipeline works by running one real one-token generation (one embedding,
on a model that cannot generate); concurrent probes share the one in flight, so probes never pile up on the scheduler.
Both answer 503 ``{"status": "unhealthy", "reason": …}`` when unhealthy, and
while the server drains on its way down.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.errors import RequestError
from tercet.frontend.io_struct import EmbeddingRequest, GenerateRequest
from tercet.ipc.messages import FinishKind
from tercet.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

DEFAULT_HEALTH_GENERATE_TIMEOUT = 20.0
HEALTH_PROMPT = "Hello"
HEALTH_RID_PREFIX = "health-"


def unhealthy_reason(tokenizer_manager) -> str | None:
    """Why the server is unhealthy (a child process died), or None when it is healthy."""
    if tokenizer_manager.is_healthy():
        return None
    return getattr(tokenizer_manager, "unhealthy_reason", None) or "the server is unhealthy"


SHUTTING_DOWN = "the server is shutting down"


def not_serving_reason(tokenizer_manager) -> str | None:
    """Why a load balancer should send nothing here: a dead child, or a graceful stop under way."""
    reason = unhealthy_reason(tokenizer_manager)
    if reason is None and getattr(tokenizer_manager, "is_draining", False):
        return SHUTTING_DOWN
    return reason


def unhealthy_response(reason: str) -> JSONResponse:
    return JSONResponse({"status": "unhealthy", "reason": reason}, status_code=503)


class HealthGenerateProbe:
    """Runs one-token generations for ``/health_generate``, at most one at a time.

    A caller arriving while a probe runs awaits that probe's result; one
    arriving after it finished starts a new one. A probe that takes longer than
    ``timeout`` seconds is abandoned: its generation iterator is closed, which
    aborts the request in the scheduler.
    """

    def __init__(self, tokenizer_manager, timeout: float = DEFAULT_HEALTH_GENERATE_TIMEOUT):
        self.tokenizer_manager = tokenizer_manager
        self.timeout = timeout
        self._in_flight: asyncio.Task | None = None

    async def check(self) -> str | None:
        """None when a generation succeeded; otherwise why it did not."""
        task = self._in_flight
        if task is None:
            task = asyncio.ensure_future(self._probe())
            self._in_flight = task
            task.add_done_callback(self._forget)
        # Shielded: a caller that goes away must not cancel the others' probe.
        return await asyncio.shield(task)

    def _forget(self, task: asyncio.Task) -> None:
        if self._in_flight is task:
            self._in_flight = None
        if not task.cancelled():
            task.exception()  # _probe never raises; this just marks it retrieved

    async def _probe(self) -> str | None:
        abilities = getattr(self.tokenizer_manager, "abilities", None)
        if abilities is not None and not abilities.can_generate:
            return await self._embedding_probe()
        request = GenerateRequest(
            SamplingParams(max_new_tokens=1, temperature=0.0),
            text=HEALTH_PROMPT,
            rid=f"{HEALTH_RID_PREFIX}{uuid.uuid4().hex}",
        )
        outputs = self.tokenizer_manager.generate(request)
        try:
            return await self._within_timeout("generation", request.rid, _consume(outputs))
        finally:
            await _close(outputs)

    async def _embedding_probe(self) -> str | None:
        request = EmbeddingRequest([HEALTH_PROMPT], rid=f"{HEALTH_RID_PREFIX}{uuid.uuid4().hex}")

        async def embedded() -> None:
            await self.tokenizer_manager.embed(request)

        return await self._within_timeout("embedding", request.rid, embedded())

    async def _within_timeout(self, probe: str, rid: str, work) -> str | None:
        """What is wrong with the server, by how ``work`` (the probe, None when it went well) ended."""
        try:
            # wait_for cancels the probe at the timeout, which aborts it in the scheduler.
            return await asyncio.wait_for(work, self.timeout)
        except asyncio.TimeoutError:
            logger.warning("health probe %s got no output within %.1f s; aborting it", rid, self.timeout)
            return f"the health {probe} did not finish within {self.timeout:g} s"
        except RequestError as error:
            return f"the health {probe} was refused: {error.message}"
        except Exception as error:
            logger.exception("health probe %s failed", rid)
            return f"the health {probe} failed: {type(error).__name__}: {error}"


async def _consume(outputs) -> str | None:
    async for piece in outputs:
        reason = piece.finish_reason
        if reason is None:
            continue
        if reason.kind is FinishKind.ABORT:
            return f"the health generation was aborted: {reason.message or 'no reason given'}"
        return None
    return "the health generation ended without a finish reason"


async def _close(outputs) -> None:
    aclose = getattr(outputs, "aclose", None)
    if aclose is None:
        return
    try:
        await aclose()
    except Exception:
        logger.exception("closing a health probe's generation failed")


async def health(request: Request, tokenizer_manager) -> Response:
    reason = not_serving_reason(tokenizer_manager)
    if reason is not None:
        return unhealthy_response(reason)
    return JSONResponse({"status": "ok"})


async def health_generate(request: Request, tokenizer_manager) -> Response:
    reason = not_serving_reason(tokenizer_manager)
    if reason is None:
        probe = getattr(request.app.state, "health_generate_probe", None)
        if probe is None:  # an app built without create_app
            probe = HealthGenerateProbe(tokenizer_manager)
            request.app.state.health_generate_probe = probe
        # A child that died during the probe names the real cause.
        reason = await probe.check()
        reason = unhealthy_reason(tokenizer_manager) or reason
    if reason is not None:
        return unhealthy_response(reason)
    return JSONResponse({"status": "ok"})


ROUTES = [
    ("/health", health, ["GET"]),
    ("/health_generate", health_generate, ["GET"]),
]
PATHS = frozenset(path for path, _, _ in ROUTES)
