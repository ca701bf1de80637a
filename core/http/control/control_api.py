"""Control endpoints, each a Communicator fan-out to every data-parallel rank.

``POST /flush_cache``, ``GET /get_server_info``, ``POST /abort_request``,
``POST /pause_generation``, ``POST /continue_generation``,
``POST /update_weights_from_disk``, ``POST /load_lora_adapter`` and
``POST /unload_lora_adapter`` (those two in :mod:`tercet.http.control.lora_api`).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.config_display import config_shown
from tercet.errors import RequestError
from tercet.field_checks import NumberRange, check_non_empty_text, check_text
from tercet.http.errors import read_json_object
from tercet.ipc.control_messages import (
    AbortAllReq,
    ContinueGenerationReq,
    FlushCacheReq,
    GetInternalStateReq,
    PauseGenerationReq,
    UpdateWeightsFromDiskReq,
)

FLUSH_RETRY_INTERVAL = 0.05
# Seconds a control call may be told to wait (the OpenAPI document reads it too).
TIMEOUT_RANGE = NumberRange(0.0, 3600.0)
# The longest path Linux opens (PATH_MAX): a longer model_path names nothing.
MAX_PATH_CHARACTERS = 4096


async def _optional_body(request: Request) -> dict:
    return await read_json_object(request) if await request.body() else {}


def _timeout(body: dict, default: float) -> float:
    value = body.get("timeout")
    if value is None:
        return default
    # Bounded before float(), which overflows on a 400-digit integer.
    TIMEOUT_RANGE.check(value, "timeout")
    return float(value)


def _failures(replies) -> str:
    return "; ".join(f"rank {reply.rank}: {reply.message}" for reply in replies if not reply.ok)


async def flush_cache(request: Request, tokenizer_manager) -> Response:
    """Refused (409) while requests run, unless ``timeout`` seconds to wait for idle are given."""
    deadline = time.monotonic() + _timeout(await _optional_body(request), 0.0)
    while True:
        replies = await tokenizer_manager.control(FlushCacheReq)
        if all(reply.ok for reply in replies):
            return JSONResponse({"ok": True, "ranks": [reply.data for reply in replies]})
        if time.monotonic() >= deadline:
            raise RequestError(f"cannot flush the cache now: {_failures(replies)}", status_code=409)
        await asyncio.sleep(FLUSH_RETRY_INTERVAL)


async def get_server_info(request: Request, tokenizer_manager) -> Response:
    replies = await tokenizer_manager.control(GetInternalStateReq, mode="shared")
    config = config_shown(tokenizer_manager.context.config)
    return JSONResponse({
        "served_model_name": tokenizer_manager.served_model_name,
        "context_len": tokenizer_manager.context_len,
        "config": config,
        "requests_in_flight_per_rank": tokenizer_manager.num_requests_per_rank(),
        "api_workers": tokenizer_manager.api_workers(),
        "contained_failures": tokenizer_manager.contained_failures(),
        # Every rank serves the same adapters (loads and unloads reach them all); each rank's
        # entry also lists its own, with the requests it received for each.
        "lora_adapters": [entry["name"] for entry in replies[0].data.get("lora_adapters", [])] if replies else [],
        "ranks": [reply.data for reply in replies],
    })


async def abort_request(request: Request, tokenizer_manager) -> Response:
    """``{"rid": id}`` aborts one request (all its completions); ``{"abort_all": true}`` every one."""
    abort_all, rid = _abort_target(await read_json_object(request))
    if abort_all:
        replies = await tokenizer_manager.control(AbortAllReq)
        return JSONResponse({"ok": True, "num_aborted": sum(reply.data.get("num_aborted", 0) for reply in replies)})
    if rid is None:
        raise RequestError('send {"rid": "<request id>"} or {"abort_all": true}', "rid")
    return JSONResponse({"ok": True, "aborted": await tokenizer_manager.abort_request(rid)})


def _abort_target(body: dict) -> tuple[bool, str | None]:
    """``(abort_all, rid)``, both checked before either acts: ``{"rid": …, "abort_all": "yes"}``
    is refused, not read as false."""
    abort_all, rid = body.get("abort_all"), body.get("rid")
    if abort_all is not None and not isinstance(abort_all, bool):
        raise RequestError("abort_all must be true or false", "abort_all")
    if rid is not None:
        check_non_empty_text(rid, "rid")
    return bool(abort_all), rid


async def pause_generation(request: Request, tokenizer_manager) -> Response:
    await tokenizer_manager.control(PauseGenerationReq)
    return JSONResponse({"ok": True, "is_paused": True})


async def continue_generation(request: Request, tokenizer_manager) -> Response:
    await tokenizer_manager.control(ContinueGenerationReq)
    return JSONResponse({"ok": True, "is_paused": False})


async def update_weights_from_disk(request: Request, tokenizer_manager) -> Response:
    """Load another checkpoint of the served model. An operator's route: a refusal says why in few
    words, never echoing the path or what the server found there (its log has the details)."""
    body = await read_json_object(request)
    model_path = _checkpoint_path(body.get("model_path"), tokenizer_manager.context.config.server.weights_dirs)
    timeout = _timeout(body, 600.0)
    await tokenizer_manager.control(PauseGenerationReq)
    try:
        replies = await tokenizer_manager.control(UpdateWeightsFromDiskReq, timeout=timeout, model_path=model_path)
    finally:
        await tokenizer_manager.control(ContinueGenerationReq)
    if not all(reply.ok for reply in replies):
        updated = [reply.rank for reply in replies if reply.ok]
        note = f" (ranks {updated} did update)" if updated else "; the previous weights keep serving"
        raise RequestError(f"weights not updated: {_failures(replies)}{note}", "model_path")
    return JSONResponse({"ok": True, "model_path": model_path, "num_ranks": len(replies)})


def _checkpoint_path(model_path, weights_dirs: tuple[str, ...]) -> str:
    """``model_path``: a path no longer than a path may be, under one of ``weights_dirs`` when any are set."""
    if not isinstance(model_path, str) or not model_path:
        raise RequestError("model_path must be a checkpoint directory on the server", "model_path")
    check_text(model_path, "model_path")
    if len(model_path) > MAX_PATH_CHARACTERS or "\0" in model_path:
        raise RequestError(f"model_path must be a path of at most {MAX_PATH_CHARACTERS} characters, "
                           "without NUL characters", "model_path")
    if weights_dirs and not any(_is_under(model_path, directory) for directory in weights_dirs):
        raise RequestError("model_path is not under a directory that [server] weights_dirs allows", "model_path")
    return model_path


def _is_under(path: str, directory: str) -> bool:
    # Resolved first, so that neither ".." nor a symbolic link leads out of the directory.
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(directory))
