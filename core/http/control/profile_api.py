"""Profiling on demand: ``POST /start_profile`` and ``POST /stop_profile``, to every rank.

Each data-parallel rank records a torch profile of its own process and writes it as one Chrome
trace (:mod:`tercet.scheduler.rank_profiler`); the server keeps serving meanwhile. The body of
``/start_profile`` (every field optional):

- ``output_dir``: a directory relative to ``[server] profile_dir`` (default: the start's date and
  time). Absolute paths, ``..`` and symbolic links leading outside it are refused with a 400,
  before anything is written;
- ``activities``: some of ``"CPU"``, ``"CUDA"`` (default: CPU, and CUDA on a rank that runs on a GPU);
- ``seconds``: record that long, then write the traces and answer with their paths;
- ``num_steps``: record until every rank has run that many model steps (a rank stepping less
  within ``timeout`` seconds is stopped then), write the traces and answer with their paths.

With neither, the answer comes at once and ``POST /stop_profile`` ends the recording and answers
with the traces' paths.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.errors import RequestError
from tercet.field_checks import NumberRange, check_text, is_integer
from tercet.http.control.control_api import TIMEOUT_RANGE
from tercet.http.errors import read_json_object
from tercet.ipc.control_messages import ProfileStatusReq, StartProfileReq, StopProfileReq

ACTIVITY_NAMES = ("CPU", "CUDA")
SECONDS_RANGE = NumberRange(0.001, 3600.0)
NUM_STEPS_RANGE = NumberRange(1, 1_000_000)
# How long a num_steps recording may wait for the ranks to step (the body's "timeout" changes it).
DEFAULT_STEPS_TIMEOUT = 300.0
# Writing a long recording's trace takes a while: the ranks get this long to answer /stop_profile.
WRITE_TIMEOUT = 600.0
STATUS_POLL_INTERVAL = 0.05
MAX_OUTPUT_DIR_CHARACTERS = 1024


@dataclass(frozen=True)
class ProfilePlan:
    """What one ``/start_profile`` asks for, checked."""

    output_dir: str  # absolute, inside the profile root
    activities: list[str] | None
    seconds: float | None
    num_steps: int | None
    timeout: float

    @classmethod
    def of(cls, body: dict, root: str) -> "ProfilePlan":
        seconds, num_steps = _length(body)
        timeout = body.get("timeout")
        if timeout is not None:
            TIMEOUT_RANGE.check(timeout, "timeout")
        requested = body.get("output_dir")
        if requested is None:
            requested = time.strftime("%Y%m%d-%H%M%S")
        return cls(checked_output_dir(requested, root), _activities(body.get("activities")), seconds, num_steps,
                   DEFAULT_STEPS_TIMEOUT if timeout is None else float(timeout))


def _length(body: dict) -> tuple[float | None, int | None]:
    """``(seconds, num_steps)``: at most one of them given, each in its range."""
    seconds, num_steps = body.get("seconds"), body.get("num_steps")
    if seconds is not None and num_steps is not None:
        raise RequestError("give seconds or num_steps, not both", "seconds")
    if seconds is not None:
        SECONDS_RANGE.check(seconds, "seconds")
        seconds = float(seconds)
    if num_steps is not None:
        if not is_integer(num_steps):
            raise RequestError("num_steps must be an integer", "num_steps")
        NUM_STEPS_RANGE.check(num_steps, "num_steps")
    return seconds, num_steps


def checked_output_dir(requested, root: str) -> str:
    """``requested`` as an absolute directory inside ``root``; a 400 for anything that could lead elsewhere."""
    if not isinstance(requested, str) or not requested:
        raise RequestError("output_dir must be a directory name relative to [server] profile_dir", "output_dir")
    check_text(requested, "output_dir")
    if len(requested) > MAX_OUTPUT_DIR_CHARACTERS or "\0" in requested or "\\" in requested:
        raise RequestError(f"output_dir must be at most {MAX_OUTPUT_DIR_CHARACTERS} characters, without NUL "
                           "or backslash", "output_dir")
    if os.path.isabs(requested) or requested.startswith("~"):
        raise RequestError("output_dir must be relative to [server] profile_dir, not an absolute path", "output_dir")
    if ".." in requested.split("/"):
        raise RequestError("output_dir must not contain '..'", "output_dir")
    candidate = os.path.normpath(os.path.join(root, requested))
    # Resolved, so that a symbolic link inside the root cannot lead out of it.
    if not Path(os.path.realpath(candidate)).is_relative_to(os.path.realpath(root)):
        raise RequestError("output_dir leads outside [server] profile_dir (through a symbolic link)", "output_dir")
    return candidate


def _activities(value) -> list[str] | None:
    if value is None:
        return None
    if (not isinstance(value, list) or not value or len(value) > len(ACTIVITY_NAMES)
            or any(name not in ACTIVITY_NAMES for name in value) or len(set(value)) != len(value)):
        raise RequestError(f"activities must be a list of some of {list(ACTIVITY_NAMES)}", "activities")
    return value


async def start_profile(request: Request, tokenizer_manager) -> Response:
    body = await read_json_object(request) if await request.body() else {}
    plan = ProfilePlan.of(body, tokenizer_manager.context.config.server.profile_root)
    _make_directory(plan.output_dir)
    replies = await tokenizer_manager.control(StartProfileReq, output_dir=plan.output_dir,
                                              activities=plan.activities, num_steps=plan.num_steps)
    failed = [reply for reply in replies if not reply.ok]
    if failed:
        if len(failed) < len(replies):  # nothing half-way: the ranks that started stop again
            await tokenizer_manager.control(StopProfileReq, timeout=WRITE_TIMEOUT)
        raise _refusal(failed)
    if plan.seconds is None and plan.num_steps is None:
        return JSONResponse({"ok": True, "recording": True, "output_dir": plan.output_dir, "num_ranks": len(replies)})
    try:
        if plan.seconds is not None:
            await asyncio.sleep(plan.seconds)
        else:
            await _until_written(tokenizer_manager, plan.timeout)
    except asyncio.CancelledError:  # the client left: the recording still ends, and its traces are written
        asyncio.get_running_loop().create_task(tokenizer_manager.control(StopProfileReq, timeout=WRITE_TIMEOUT))
        raise
    return await stop_profile(request, tokenizer_manager)


async def _until_written(tokenizer_manager, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        replies = await tokenizer_manager.control(ProfileStatusReq)
        if all(reply.ok and not reply.data.get("recording") for reply in replies):
            return
        await asyncio.sleep(STATUS_POLL_INTERVAL)


async def stop_profile(request: Request, tokenizer_manager) -> Response:
    """End the recording on every rank; the answer names each rank's trace once all are written."""
    replies = await tokenizer_manager.control(StopProfileReq, timeout=WRITE_TIMEOUT)
    written = [reply for reply in replies if reply.ok]
    if not written:
        raise _refusal(replies)
    traces = [{"rank": reply.rank, **reply.data} for reply in written]
    output_dirs = sorted({os.path.dirname(trace["path"]) for trace in traces if trace.get("path")})
    return JSONResponse({"ok": True, "output_dir": output_dirs[0] if len(output_dirs) == 1 else output_dirs,
                         "traces": traces, "num_ranks": len(replies)})


def _make_directory(directory: str) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise RequestError(f"output_dir cannot be made: {error.strerror}", "output_dir") from None


def _refusal(failed) -> RequestError:
    """The first refusal's status (409: already or not recording; 400: a bad field), every rank's reason."""
    status = failed[0].data.get("status_code", 400)
    reasons = "; ".join(f"rank {reply.rank}: {reply.message}" for reply in failed)
    return RequestError(reasons, status_code=status)
