"""``GET /``: a chat page, plain HTML and JavaScript with no build step.

The page talks to this server's own ``/v1/chat/completions`` (streamed) and
``/v1/models``. It needs no credentials to load (it holds no secret); with
``server.api_key`` set, the page asks for the key and sends it as a bearer
token, as any client does. Stopping an answer closes the stream, which
aborts the request on the server and frees its KV cache.
"""

from __future__ import annotations

import functools
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

PATH = "/"


@functools.lru_cache(maxsize=1)
def page_html() -> str:
    return resources.files("tercet.http").joinpath("chat_page.html").read_text(encoding="utf-8")


async def chat_page(request: Request, tokenizer_manager) -> Response:
    return HTMLResponse(page_html(), headers={"Cache-Control": "no-cache"})


ROUTES = [(PATH, chat_page, ["GET"])]
