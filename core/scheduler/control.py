"""The scheduler's side of the control plane: built-in control requests and replies.

Every ControlRequest is answered with one ControlReply sent straight to the
TokenizerManager; a handler's dict becomes the reply's data, an exception
becomes ``ok=False`` with its message, and the scheduler keeps serving.

The handlers see a :class:`ControlTarget`: the parts of the rank a control
request may act on, never the Scheduler itself.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from tercet.containment import ContainedFailures
from tercet.errors import RequestError, TercetError
from tercet.ipc.control_messages import (
    AbortAllReq,
    AbortRequestsReq,
    ContinueGenerationReq,
    ControlReply,
    ControlRequest,
    FlushCacheReq,
    GetInternalStateReq,
    ListLoraAdaptersReq,
    LoadLoraAdapterReq,
    PauseGenerationReq,
    ProfileStatusReq,
    RestoreSessionReq,
    SaveSessionReq,
    StartProfileReq,
    StopProfileReq,
    UnloadLoraAdapterReq,
    UpdateWeightsFromDiskReq,
)
from tercet.ipc.messages import FinishKind, FinishReason
from tercet.scheduler.kv_tiers.tiered_cache import demotion_paused, saved_sessions_of
from tercet.scheduler.stats import SchedulerStats

if TYPE_CHECKING:
    from tercet.scheduler.grammar.compiler import GrammarCompiler
    from tercet.scheduler.kv_memory import RequestKVMemory
    from tercet.scheduler.rank_profiler import RankProfiler
    from tercet.scheduler.request_queues import RequestQueues

logger = logging.getLogger(__name__)
# What a rank that could not load new weights replies; the reason is in its log.
WEIGHTS_NOT_LOADED = ("the weights could not be loaded from model_path (no readable checkpoint of the served "
                      "model's architecture there; the server log has the reason)")
# The most of a path or a reason one log line holds.
MAX_LOGGED_CHARS = 300


def shortened(text: str) -> str:
    """``text`` cut to ``MAX_LOGGED_CHARS`` characters, with escapes for what a log line must not hold."""
    text = text.encode("unicode_escape").decode("ascii")  # one line, whatever the path holds
    return text if len(text) <= MAX_LOGGED_CHARS else text[:MAX_LOGGED_CHARS] + f"... ({len(text)} characters)"


class ControlRefused(TercetError):
    """The rank cannot do it now (for example: requests are running)."""


@dataclasses.dataclass(frozen=True)
class ControlTarget:
    """What control handlers may act on: the rank's requests, KV memory, grammars and model."""

    rank: int
    # In-flight requests and waiting embedding inputs, pause, abort.
    queues: "RequestQueues"
    # The page size and the prefix cache.
    kv_memory: "RequestKVMemory"
    # Requests whose grammar is still compiling (abort_all ends them too).
    grammars: "GrammarCompiler"
    # The model: its weights' description, and reloading them.
    model_runner: object
    failures: ContainedFailures
    # Speculative decoding (a tercet.scheduler.speculative.speculation.Speculation), None when off: its figures.
    speculation: object | None = None
    # The LoRA adapters (a tercet.scheduler.lora_adapters.SchedulerAdapters), None when LoRA is off.
    adapters: object | None = None
    # The torch profiler that POST /start_profile drives; None: this rank cannot profile.
    profiler: "RankProfiler | None" = None

    def rank_profiler(self) -> "RankProfiler":
        if self.profiler is None:
            raise ControlRefused(f"rank {self.rank} cannot record profiles")
        return self.profiler

    def after_model_step(self) -> None:
        """A model step ran: a profile being recorded counts it."""
        if self.profiler is not None:
            self.profiler.after_step()

    def lora_adapters(self):
        if self.adapters is None:
            raise ControlRefused("this server serves no LoRA adapters: start it with [lora] enabled = true "
                                 "or [lora] adapters")
        return self.adapters

    @property
    def prefix_cache(self):
        return self.kv_memory.prefix_cache

    def stats(self) -> SchedulerStats:
        speculation = self.speculation.stats.as_dict() if self.speculation is not None else None
        return SchedulerStats.of(self.rank, self.queues, self.kv_memory, speculation, self.adapters)


def builtin_control_handlers(target: ControlTarget) -> list[tuple[type, object]]:
    return [
        (FlushCacheReq, lambda message: flush_cache(target)),
        (GetInternalStateReq, lambda message: internal_state(target)),
        (PauseGenerationReq, lambda message: set_paused(target, True)),
        (ContinueGenerationReq, lambda message: set_paused(target, False)),
        (AbortAllReq, lambda message: abort_all(target)),
        (AbortRequestsReq, lambda message: abort_requests(target, message.rids)),
        (UpdateWeightsFromDiskReq, lambda message: update_weights(target, message.model_path)),
        (LoadLoraAdapterReq, lambda message: target.lora_adapters().load(message.lora_name, message.lora_path)),
        (UnloadLoraAdapterReq, lambda message: target.lora_adapters().unload(message.lora_name)),
        (ListLoraAdaptersReq, lambda message: {"adapters": list_adapters(target)}),
        (StartProfileReq, lambda message: target.rank_profiler().start(message.output_dir, message.activities,
                                                                        message.num_steps)),
        (StopProfileReq, lambda message: target.rank_profiler().stop()),
        (ProfileStatusReq, lambda message: target.rank_profiler().status()),
        (SaveSessionReq, lambda message: saved_sessions_of(target.kv_memory).save(message.name, message.token_ids)),
        (RestoreSessionReq, lambda message: saved_sessions_of(target.kv_memory).restore(message.name)),
    ]


def answer(target: ControlTarget, message: ControlRequest, handler) -> ControlReply:
    try:
        data = handler(message)
    except Exception as error:  # the reply carries the failure; the rank keeps serving
        if not isinstance(error, TercetError):  # a refusal (busy, bad path) is an answer, not a failure
            target.failures.record("control_handler", f"control request {type(message).__name__} failed")
        # A request's refusal keeps its status (a 404 for an unknown adapter, a 409 for one in use).
        data = {"status_code": error.status_code} if isinstance(error, RequestError) else {}
        return ControlReply(message.request_id, target.rank, False, str(error) or type(error).__name__, data)
    return ControlReply(message.request_id, target.rank, True, None, dict(data or {}))


def flush_cache(target: ControlTarget) -> dict:
    in_flight = target.queues.num_in_flight
    if in_flight:
        raise ControlRefused(f"rank {target.rank} has {in_flight} requests in flight; flush when idle")
    cache = target.prefix_cache
    with demotion_paused(target.kv_memory):  # flushed pages are not kept below the pool either
        freed = cache.evict(cache.num_cached_pages) if cache else 0
    return {"freed_tokens": freed * target.kv_memory.page_size}


def internal_state(target: ControlTarget) -> dict:
    stats = target.stats()
    state = dataclasses.asdict(stats)
    del state["page_size"]
    return {
        **state,
        "kv_usage": stats.kv_usage,
        "contained_failures": target.failures.as_dict(),
        "weights": target.model_runner.weights_info,
        "lora_adapters": list_adapters(target),
    }


def list_adapters(target: ControlTarget) -> list[dict]:
    """The rank's LoRA adapters (none when LoRA is off)."""
    return [] if target.adapters is None else target.adapters.as_list()


def set_paused(target: ControlTarget, paused: bool) -> dict:
    if paused:
        target.queues.pause()
    else:
        target.queues.resume()
    logger.info("generation %s", "paused" if paused else "continues")
    return {"is_paused": paused}


def abort_all(target: ControlTarget) -> dict:
    reason = FinishReason(FinishKind.ABORT, message="aborted by /abort_request")
    victims = target.queues.abort_all(reason)
    for group in target.grammars.drop_all():
        for req in group:
            target.queues.finish(req, reason)
            victims.append(req)
    return {"num_aborted": len(victims)}


def abort_requests(target: ControlTarget, rids: list[str]) -> dict:
    """Abort each of ``rids`` and its completions ``rid#i``: running, waiting, embedding or compiling."""
    chosen = {rid for rid in _rids_held(target) if any(rid == wanted or rid.startswith(wanted + "#") for wanted in rids)}
    reason = FinishReason(FinishKind.ABORT, message="aborted by /abort_request")
    compiling = [req for group in target.grammars.drop(chosen) for req in group]
    for req in compiling:
        target.queues.finish(req, reason)
    num_aborted = sum(target.queues.abort(rid, reason) for rid in chosen)
    return {"num_aborted": len(compiling) + num_aborted}


def _rids_held(target: ControlTarget) -> list[str]:
    queues = target.queues
    return [
        *(req.rid for req in queues.running),
        *(req.rid for leader in queues.waiting for req in leader.group),
        *(req.rid for req in queues.waiting_embeddings),
        *(req.rid for entry in target.grammars.pending for req in entry.group),
    ]


def update_weights(target: ControlTarget, model_path: str) -> dict:
    # Steps stop while this runs (the scheduler handles it between steps), so
    # in-flight requests pause and continue with the new weights; cached
    # prefixes hold K/V of the old weights and are dropped.
    try:
        target.model_runner.update_weights_from_disk(model_path)
    except Exception as error:  # the current weights keep serving (they are replaced only once all loaded)
        # A wrong path is the operator's mistake, not the rank's failure: one line in the log says
        # why, and the reply only that it did not load. The loader's own words would tell the
        # client which server paths exist and quote the bytes of the file it was pointed at.
        logger.warning("weights not updated from %s: %s", shortened(model_path), shortened(f"{type(error).__name__}: "
                                                                                            f"{error}"))
        raise ControlRefused(WEIGHTS_NOT_LOADED) from None
    cache = target.prefix_cache
    if cache is not None:
        with demotion_paused(target.kv_memory):
            cache.evict(cache.num_cached_pages)
    if target.kv_memory.kv_tiers is not None:  # pages keyed by the old weights are never asked for again
        target.kv_memory.kv_tiers.weights_changed()
    logger.info("weights reloaded from %s", model_path)
    return {"model_path": model_path}
