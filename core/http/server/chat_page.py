"""``GET /``: a chat page, plain HTML and JavaScript with no build step.

The page talks to this server's own ``/v1/chat/completions`` (streamed) and
``/v1/models``. It needs no credentials to load (it holds no secret); with
``server.api_key`` set, the page asks for the key and sends it as a bearer
token, as any client does. Stopping an answer closes the stream, which
aborts the request on the server and frees its KV cache. ``GET /favicon.ico``
is the page's icon (an SVG), so a browser's own request for it finds one.
"""

from __future__ import annotations

import functools
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

PATH = "/"
FAVICON_PATH = "/favicon.ico"
# Neither holds a secret, and a browser asks for them without the key.
PATHS = frozenset({PATH, FAVICON_PATH})
# A speech bubble holding three dots: the page's icon, small enough to live here.
FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    '<path d="M4 6h24a2 2 0 0 1 2 2v13a2 2 0 0 1-2 2H13l-6 5v-5H4a2 2 0 0 1-2-2V8a2 2 0 0 1 2-2z" fill="#2f5db8"/>'
    '<circle cx="10" cy="14.5" r="2" fill="#fff"/><circle cx="16" cy="14.5" r="2" fill="#fff"/>'
    '<circle cx="22" cy="14.5" r="2" fill="#fff"/></svg>'
)


@functools.lru_cache(maxsize=1)
def page_html() -> str:
    return resources.files("tercet.http.server").joinpath("chat_page.html").read_text(encoding="utf-8")


async def chat_page(request: Request, tokenizer_manager) -> Response:
    return HTMLResponse(page_html(), headers={"Cache-Control": "no-cache"})


async def favicon(request: Request, tokenizer_manager) -> Response:
    return Response(FAVICON_SVG, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


ROUTES = [(PATH, chat_page, ["GET"]), (FAVICON_PATH, favicon, ["GET"])]
