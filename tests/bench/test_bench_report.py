import json

from tercet.bench.report import format_summary, summary_as_json
from tercet.bench.serving import BenchConfig
from tercet.bench.streaming_client import RequestOutcome
from tercet.bench.summary import summarize

CONFIG = BenchConfig(
    base_url="http://127.0.0.1:30000", num_prompts=2, input_len=10, output_len=3,
    concurrency=2, model="tiny", api_key="secret", tokenizer="/models/tiny",
)
LATENCY_FIELDS = [
    f"{statistic}_{name}_ms" for name in ("ttft", "itl", "e2e_latency") for statistic in ("mean", "p50", "p99")
]


def outcome(error="", itl=(0.01, 0.02)):
    return RequestOutcome(not error, error, 10, 10, 0 if error else 3, None if error else 0.1, itl, 0.2)


def test_json_has_every_field_and_the_configuration_without_the_key():
    summary = summarize([outcome(), outcome(error="HTTP 404: no such model")], duration_s=1.0)
    result = json.loads(json.dumps(summary_as_json(summary, CONFIG)))
    for field in [
        "completed", "failed", "duration_s", "requests_per_s", "input_tokens_per_s", "output_tokens_per_s",
        "total_input_tokens", "total_output_tokens", "itl_basis", "errors", "config", *LATENCY_FIELDS,
    ]:
        assert field in result
    assert (result["completed"], result["failed"]) == (1, 1)
    assert result["p50_itl_ms"] == 15.0
    assert result["errors"] == [{"error": "HTTP 404: no such model", "count": 1}]
    assert result["config"]["model"] == "tiny"
    assert result["config"]["concurrency"] == 2
    assert "api_key" not in result["config"]
    assert "secret" not in json.dumps(result)


def test_json_gives_null_for_statistics_without_samples():
    result = summary_as_json(summarize([outcome(itl=())], duration_s=1.0), CONFIG)
    assert result["p99_itl_ms"] is None
    assert result["p99_ttft_ms"] == 100.0


def test_text_report_is_a_table_with_latency_rows():
    text = format_summary(summarize([outcome(), outcome(itl=())], duration_s=0.5), CONFIG)
    assert "Completed / failed:" in text and "2 / 0" in text
    assert "Output tokens/s:" in text and "12.0" in text
    ttft_row = next(line for line in text.splitlines() if line.startswith("TTFT"))
    assert ttft_row.split()[1:] == ["100.00", "100.00", "100.00"]
    assert "2 requests in flight" in text
    assert "Errors" not in text


def test_text_report_lists_errors_and_missing_statistics():
    text = format_summary(summarize([outcome(error="ConnectError: refused")], duration_s=0.5), CONFIG)
    assert "1 × ConnectError: refused" in text
    itl_row = next(line for line in text.splitlines() if line.startswith("ITL "))
    assert itl_row.split()[1:] == ["n/a", "n/a", "n/a"]


def test_text_report_describes_poisson_traffic():
    config = BenchConfig(base_url="http://x", num_prompts=1, input_len=1, output_len=1, request_rate=2.5, model="m")
    assert "Poisson arrivals at 2.5 requests/s" in format_summary(summarize([outcome()], 1.0), config)
