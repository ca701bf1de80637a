"""``GET /metrics``: the Prometheus text exposition of :mod:`tercet.metrics.serving_metrics`.

The request metrics the API process keeps, and each rank's figures as its latest
report gave them (the ranks send them between steps, unasked): a scrape reads
only what this process holds, so it never waits on a rank's step.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response


async def metrics(request: Request, tokenizer_manager) -> Response:
    return Response(generate_latest(tokenizer_manager.metrics.registry), media_type=CONTENT_TYPE_LATEST)


ROUTES = [("/metrics", metrics, ["GET"])]
