"""Saved sessions over HTTP: ``POST /sessions/{name}/save`` and ``POST /sessions/{name}/restore``.

Save's body names the prefix to keep, in exactly one of three ways:
``{"messages": [...]}`` (rendered as the chat endpoints render them, with the
generation prompt: send the messages of the conversation's last request),
``{"text": "..."}`` (tokenized as ``/generate`` tokenizes text) or
``{"input_ids": [...]}``. Each data-parallel rank writes what it holds of the
prefix (its pool, then its tier) to the file tier under the name; the reply
gives the most tokens saved. Restore (no body) puts the session into every
rank's pool and prefix cache, so the conversation's next turn prefills only
its new tokens. Both need ``[cache] storage = "file"`` (a 400 says so), and
the server's API key, as every route.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.errors import RequestError
from tercet.http.errors import read_json_object
from tercet.ipc.control_messages import RestoreSessionReq, SaveSessionReq
from tercet.scheduler.kv_tiers.session_names import check_session_name

PREFIX_FIELDS = ("messages", "text", "input_ids")
# Seconds a rank may take to write or read a session (a long prefix is some megabytes per thousand tokens).
SESSION_TIMEOUT = 300.0


async def save_session(request: Request, tokenizer_manager) -> Response:
    name = check_session_name(request.path_params["name"])
    token_ids = await prefix_tokens(await read_json_object(request), tokenizer_manager)
    replies = await tokenizer_manager.control(SaveSessionReq, timeout=SESSION_TIMEOUT, name=name,
                                              token_ids=token_ids)
    saved = [reply for reply in replies if reply.ok]
    if not saved:
        raise _refusal(replies)
    best = max(saved, key=lambda reply: reply.data.get("saved_tokens", 0))
    return JSONResponse({"ok": True, **best.data, "prefix_tokens": len(token_ids), "rank": best.rank})


async def restore_session(request: Request, tokenizer_manager) -> Response:
    name = check_session_name(request.path_params["name"])
    replies = await tokenizer_manager.control(RestoreSessionReq, timeout=SESSION_TIMEOUT, name=name)
    failed = [reply for reply in replies if not reply.ok]
    if failed:
        raise _refusal(failed)
    return JSONResponse({"ok": True, "name": name,
                         "restored_tokens": min(reply.data.get("restored_tokens", 0) for reply in replies),
                         "ranks": [reply.data for reply in replies]})


async def prefix_tokens(body: dict, tokenizer_manager) -> list[int]:
    """The token ids of the prefix the body names, in exactly one of ``PREFIX_FIELDS``."""
    given = [field for field in PREFIX_FIELDS if body.get(field) is not None]
    if len(given) != 1:
        raise RequestError("send exactly one of messages, text or input_ids: the prefix to save", "messages")
    tokens_of = {"messages": _messages_tokens, "text": _text_tokens, "input_ids": _checked_input_ids}[given[0]]
    return await tokens_of(body[given[0]], tokenizer_manager)


async def _messages_tokens(messages, tokenizer_manager) -> list[int]:
    if not isinstance(messages, list) or not messages or not all(isinstance(message, dict) for message in messages):
        raise RequestError("messages must be a non-empty list of message objects", "messages")
    return await tokenizer_manager.tokenize_chat(messages, None)


async def _text_tokens(text, tokenizer_manager) -> list[int]:
    if not isinstance(text, str) or not text:
        raise RequestError("text must be a non-empty string", "text")
    encode = tokenizer_manager.tokenizer.encode  # as /generate tokenizes a text prompt
    token_ids = list(await asyncio.get_running_loop().run_in_executor(None, encode, text))
    if not token_ids:
        raise RequestError("the text has no tokens", "text")
    return token_ids


async def _checked_input_ids(input_ids, tokenizer_manager) -> list[int]:
    vocab_size = tokenizer_manager.vocab_size
    if not isinstance(input_ids, list) or not input_ids or not all(
            isinstance(token, int) and not isinstance(token, bool) and 0 <= token < vocab_size
            for token in input_ids):
        raise RequestError(f"input_ids must be a non-empty list of integers in [0, {vocab_size})", "input_ids")
    return input_ids


def _refusal(failed) -> RequestError:
    """The first refusal's status (400 no file tier, 404 nothing cached or no such session), every rank's reason."""
    status = failed[0].data.get("status_code", 500)
    reasons = "; ".join(f"rank {reply.rank}: {reply.message}" for reply in failed)
    return RequestError(reasons, "name", status)
