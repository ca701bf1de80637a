"""A benchmark's results as one JSON object or as a table for people.

The JSON keeps every number unrounded and flat (``p99_ttft_ms``, not nested
stats), so a script can pick a field without knowing the layout; a statistic
with no samples (no request completed; one output token, so no gaps) is null.
"""

from __future__ import annotations

from tercet.bench.serving import BenchConfig
from tercet.bench.summary import BenchSummary, LatencyStats

LATENCIES = (("ttft", "TTFT"), ("itl", "ITL"), ("e2e_latency", "E2E latency"))
ITL_BASIS_NOTE = {
    "chunk": "ITL: gaps between streamed chunks, one chunk counted as one token",
    "token": "ITL: per token, from the server's per-chunk usage",
}


def summary_as_json(summary: BenchSummary, config: BenchConfig) -> dict:
    result = {
        "completed": summary.completed,
        "failed": summary.failed,
        "duration_s": summary.duration_s,
        "requests_per_s": summary.requests_per_s,
        "input_tokens_per_s": summary.input_tokens_per_s,
        "output_tokens_per_s": summary.output_tokens_per_s,
        "total_input_tokens": summary.total_input_tokens,
        "total_output_tokens": summary.total_output_tokens,
    }
    for name, _ in LATENCIES:
        stats: LatencyStats | None = getattr(summary, name)
        for statistic in ("mean", "p50", "p99"):
            result[f"{statistic}_{name}_ms"] = None if stats is None else getattr(stats, statistic)
    result["itl_basis"] = summary.itl_basis
    result["errors"] = [{"error": error, "count": count} for error, count in summary.errors]
    result["config"] = config.as_dict()
    return result


def format_summary(summary: BenchSummary, config: BenchConfig) -> str:
    outputs = str(config.output_len) if config.ignore_eos else f"up to {config.output_len} (EOS allowed)"
    rows = [
        ("Model", config.model),
        ("Server", config.base_url),
        ("Traffic", _traffic(config)),
        ("Prompts", f"{config.num_prompts} × {config.input_len} tokens in, {outputs} out (seed {config.seed})"),
        ("Warm-up requests", str(config.warmup)),
        ("Completed / failed", f"{summary.completed} / {summary.failed}"),
        ("Duration (s)", f"{summary.duration_s:.2f}"),
        ("Requests/s", f"{summary.requests_per_s:.2f}"),
        ("Input tokens/s", f"{summary.input_tokens_per_s:.1f}"),
        ("Output tokens/s", f"{summary.output_tokens_per_s:.1f}"),
        ("Total input / output tokens", f"{summary.total_input_tokens} / {summary.total_output_tokens}"),
    ]
    width = max(len(label) for label, _ in rows) + 2
    lines = ["tercet bench", "=" * 12]
    lines += [f"{label + ':':<{width}}{value}" for label, value in rows]
    lines += ["", f"{'Latency (ms)':<{width}}{'mean':>10}{'p50':>10}{'p99':>10}"]
    for name, label in LATENCIES:
        stats: LatencyStats | None = getattr(summary, name)
        values = ("n/a",) * 3 if stats is None else tuple(f"{value:.2f}" for value in (stats.mean, stats.p50, stats.p99))
        lines.append(f"{label:<{width}}" + "".join(f"{value:>10}" for value in values))
    lines.append(ITL_BASIS_NOTE[summary.itl_basis])
    if summary.errors:
        lines += ["", "Errors (most frequent first):"]
        lines += [f"  {count} × {error}" for error, count in summary.errors]
    return "\n".join(lines)


def _traffic(config: BenchConfig) -> str:
    if config.request_rate is None:
        return f"{config.concurrency} requests in flight"
    cap = "" if config.concurrency is None else f", at most {config.concurrency} in flight"
    return f"Poisson arrivals at {config.request_rate:g} requests/s{cap}"
