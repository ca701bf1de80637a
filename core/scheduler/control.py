"""The scheduler's side of the control plane: built-in control requests and replies.

Every ControlRequest is answered with one ControlReply sent straight to the
TokenizerManager; a handler's dict becomes the reply's data, an exception
becomes ``ok=False`` with its message, and the scheduler keeps serving.
"""

from __future__ import annotations

import dataclasses
import logging

from tercet.control_messages import (
    AbortAllReq,
    ContinueGenerationReq,
    ControlReply,
    ControlRequest,
    FlushCacheReq,
    GetInternalStateReq,
    PauseGenerationReq,
    UpdateWeightsFromDiskReq,
)
from tercet.errors import TercetError
from tercet.messages import FinishReason
from tercet.scheduler.stats import SchedulerStats

logger = logging.getLogger(__name__)


class ControlRefused(TercetError):
    """The rank cannot do it now (for example: requests are running)."""


def builtin_control_handlers(scheduler) -> list[tuple[type, object]]:
    return [
        (FlushCacheReq, lambda message: flush_cache(scheduler)),
        (GetInternalStateReq, lambda message: internal_state(scheduler)),
        (PauseGenerationReq, lambda message: set_paused(scheduler, True)),
        (ContinueGenerationReq, lambda message: set_paused(scheduler, False)),
        (AbortAllReq, lambda message: abort_all(scheduler)),
        (UpdateWeightsFromDiskReq, lambda message: update_weights(scheduler, message.model_path)),
    ]


def answer(scheduler, message: ControlRequest, handler) -> ControlReply:
    try:
        data = handler(message)
    except Exception as error:  # the reply carries the failure; the rank keeps serving
        if not isinstance(error, TercetError):  # a refusal (busy, bad path) is an answer, not a failure
            scheduler.failures.record("control_handler", f"control request {type(message).__name__} failed")
        return ControlReply(message.request_id, scheduler.rank, False, str(error) or type(error).__name__)
    return ControlReply(message.request_id, scheduler.rank, True, None, dict(data or {}))


def flush_cache(scheduler) -> dict:
    in_flight = len(scheduler.running) + sum(len(leader.group) for leader in scheduler.waiting)
    if in_flight:
        raise ControlRefused(f"rank {scheduler.rank} has {in_flight} requests in flight; flush when idle")
    freed = scheduler.prefix_cache.evict(scheduler.prefix_cache.num_cached_pages) if scheduler.prefix_cache else 0
    return {"freed_tokens": freed * scheduler.kv_memory.page_size}


def internal_state(scheduler) -> dict:
    stats = SchedulerStats.of(scheduler)
    state = dataclasses.asdict(stats)
    del state["page_size"]
    return {
        **state,
        "kv_usage": stats.kv_usage,
        "contained_failures": scheduler.failures.as_dict(),
        "weights": scheduler.model_runner.weights_info,
    }


def set_paused(scheduler, paused: bool) -> dict:
    scheduler.is_paused = paused
    logger.info("generation %s", "paused" if paused else "continues")
    return {"is_paused": paused}


def abort_all(scheduler) -> dict:
    victims = list(scheduler.running) + [req for leader in scheduler.waiting for req in leader.group]
    victims += [req for group in scheduler.grammars.drop_all() for req in group]
    scheduler.running, scheduler.waiting = [], []
    for req in victims:
        req.followers = []
        scheduler.finish(req, FinishReason("abort", message="aborted by /abort_request"))
    return {"num_aborted": len(victims)}


def update_weights(scheduler, model_path: str) -> dict:
    # Steps stop while this runs (the scheduler handles it between steps), so
    # in-flight requests pause and continue with the new weights; cached
    # prefixes hold K/V of the old weights and are dropped.
    scheduler.model_runner.update_weights_from_disk(model_path)
    if scheduler.prefix_cache is not None:
        scheduler.prefix_cache.evict(scheduler.prefix_cache.num_cached_pages)
    logger.info("weights reloaded from %s", model_path)
    return {"model_path": model_path}
