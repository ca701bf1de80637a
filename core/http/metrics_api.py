"""``GET /metrics``: the Prometheus text exposition of :mod:`tercet.metrics.serving_metrics`.

Each scrape asks every rank for its figures (running and waiting requests, KV
usage, prefix-cache counts, queue times), as ``/get_server_info`` does, and
publishes them with the request metrics the API process keeps.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from tercet.ipc.control_messages import GetInternalStateReq


async def metrics(request: Request, tokenizer_manager) -> Response:
    replies = await tokenizer_manager.control(GetInternalStateReq, mode="shared")
    serving_metrics = tokenizer_manager.metrics
    serving_metrics.ranks.latest = [reply.data for reply in replies if reply.ok]
    return Response(generate_latest(serving_metrics.registry), media_type=CONTENT_TYPE_LATEST)


ROUTES = [("/metrics", metrics, ["GET"])]
