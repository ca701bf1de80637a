"""KV cache usage and prefix-cache hit rate of every data-parallel rank, over HTTP.

``GET /kv_stats`` sends a :class:`KvStatsReq` control request to every
scheduler rank; each rank answers with its own figures and the route returns
them with their sum::

    {"ranks": [{"rank": 0, "kv_used_tokens": ..., ...}, ...],
     "total": {"kv_used_tokens": ..., "kv_usage": ..., "prefix_cache_hit_rate": ..., ...}}

Per rank:

- ``kv_used_tokens``, ``kv_total_tokens``, ``kv_usage``: KV pages not free
  (held by requests or by the prefix cache), all pages, in tokens; usage is
  their ratio, 0 to 1.
- ``prefix_cache_tokens``: tokens of the pages the prefix cache holds (0 with
  the cache off).
- ``prompt_tokens_admitted``, ``prompt_tokens_from_cache``: prompt tokens of
  requests at their first admission, and how many of those came from the
  prefix cache; ``prefix_cache_hit_rate`` is their ratio (0 before any).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.responses import JSONResponse

from tercet.plugin_api import ControlRequest, SchedulerStats, hookimpl

# The tercet plugin API versions this plugin is made for (see tercet.plugin_api).
TERCET_API_VERSIONS = ">=1.0,<2"

MESSAGE_TAG = "tercet_kv_stats.kv_stats_req"
ROUTE = "/kv_stats"
SUMMED_FIELDS = (
    "kv_used_tokens",
    "kv_total_tokens",
    "prefix_cache_tokens",
    "prompt_tokens_admitted",
    "prompt_tokens_from_cache",
)


@dataclass(frozen=True)
class KvStatsReq(ControlRequest):
    """Ask a scheduler rank for its KV usage and prefix-cache figures."""


def ratio(part: int, whole: int) -> float:
    return part / whole if whole > 0 else 0.0


def with_ratios(figures: dict) -> dict:
    return {
        **figures,
        "kv_usage": ratio(figures["kv_used_tokens"], figures["kv_total_tokens"]),
        "prefix_cache_hit_rate": ratio(figures["prompt_tokens_from_cache"], figures["prompt_tokens_admitted"]),
    }


def rank_stats(stats: SchedulerStats) -> dict:
    """One rank's figures, from the snapshot its scheduler hands to handlers (plain ints: they cross IPC)."""
    return with_ratios({"rank": stats.rank, **{name: getattr(stats, name) for name in SUMMED_FIELDS}})


def handle_kv_stats(stats: SchedulerStats, message: KvStatsReq) -> dict:
    return rank_stats(stats)


def summarize(per_rank: list[dict]) -> dict:
    """The route's body: every rank's figures, ordered by rank, and their total."""
    per_rank = sorted(per_rank, key=lambda figures: figures["rank"])
    total = {name: sum(figures[name] for figures in per_rank) for name in SUMMED_FIELDS}
    return {"ranks": per_rank, "total": with_ratios(total)}


async def kv_stats(request, tokenizer_manager) -> JSONResponse:
    # Read-only: a probe arriving while another is in flight shares its answer.
    replies = await tokenizer_manager.control(KvStatsReq, mode="shared")
    failed = [reply for reply in replies if not reply.ok]
    if failed:
        message = "; ".join(f"rank {reply.rank}: {reply.message}" for reply in failed)
        return JSONResponse(
            {"error": {"message": f"KV stats failed on {message}", "type": "internal_error", "param": None, "code": None}},
            status_code=500,
        )
    return JSONResponse(summarize([reply.data for reply in replies]))


@hookimpl
def register_message_types(register):
    register(MESSAGE_TAG, KvStatsReq)


@hookimpl
def register_message_handlers(component, register):
    if component == "scheduler":
        register(KvStatsReq, handle_kv_stats)


@hookimpl
def register_http_routes(register):
    register(ROUTE, kv_stats, ["GET"])
