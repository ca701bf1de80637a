import platform
import sys

from tercet.ipc.messages import FinishReason
from tercet.metrics.serving_metrics import ServingMetrics, token_count_buckets


def sample(metrics: ServingMetrics, name: str, **labels) -> float:
    return metrics.registry.get_sample_value(name, {"model_name": "m", "dp_rank": "0", **labels}) or 0.0


def test_a_finished_completion_counts_its_reason_and_tokens():
    metrics = ServingMetrics("m")
    metrics.started("a", 0)
    metrics.output("a", 3, prompt_tokens=5, finish_reason=None)
    metrics.output("a", 2, prompt_tokens=5, finish_reason=FinishReason("length"))
    assert sample(metrics, "tercet:request_success_total", finished_reason="length") == 1
    assert sample(metrics, "tercet:generation_tokens_total") == 5
    assert sample(metrics, "tercet:prompt_tokens_total") == 5
    assert sample(metrics, "tercet:time_to_first_token_seconds_count") == 1
    # The first piece's other tokens came with the first: only the second piece's two have gaps.
    assert sample(metrics, "tercet:inter_token_latency_seconds_count") == 2
    assert not metrics.in_flight


def test_embedding_inputs_count_by_outcome_with_their_prompt_tokens():
    metrics = ServingMetrics("m")
    for rid in ("e#0", "e#1", "e#2"):
        metrics.started(rid, 0)
    metrics.embedded("e#0", prompt_tokens=7, refused=False)
    metrics.embedded("e#1", prompt_tokens=9, refused=True)
    metrics.abandoned("e#2")
    metrics.embedded("e#2", prompt_tokens=4, refused=False)  # arrived after its caller left: counted once
    assert [sample(metrics, "tercet:embedding_inputs_total", outcome=outcome)
            for outcome in ("embedded", "refused", "aborted")] == [1, 1, 1]
    assert sample(metrics, "tercet:prompt_tokens_total") == 7
    assert sample(metrics, "tercet:request_success_total", finished_reason="stop") == 0
    assert not metrics.in_flight


def test_each_finished_completion_is_one_observation_of_its_prompt_and_generated_tokens():
    metrics = ServingMetrics("m", context_len=1024)
    metrics.started("a", 0)
    metrics.output("a", 3, prompt_tokens=12, finish_reason=None)
    metrics.output("a", 2, prompt_tokens=12, finish_reason=FinishReason("length"))
    assert sample(metrics, "tercet:request_prompt_tokens_count") == 1
    assert sample(metrics, "tercet:request_prompt_tokens_sum") == 12
    assert sample(metrics, "tercet:request_prompt_tokens_bucket", le="10.0") == 0
    assert sample(metrics, "tercet:request_prompt_tokens_bucket", le="20.0") == 1
    assert sample(metrics, "tercet:request_generation_tokens_sum") == 5
    assert sample(metrics, "tercet:request_generation_tokens_bucket", le="5.0") == 1


def test_token_buckets_go_one_two_five_up_to_the_context_length():
    assert token_count_buckets(1024) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
    assert token_count_buckets(5) == (1, 2, 5)


def test_the_api_process_publishes_its_own_process_metrics():
    registry = ServingMetrics("m").registry
    assert registry.get_sample_value("process_resident_memory_bytes") > 0
    assert registry.get_sample_value("python_info", {
        "implementation": platform.python_implementation(), "major": str(sys.version_info.major),
        "minor": str(sys.version_info.minor), "patchlevel": str(sys.version_info.micro), "version": platform.python_version(),
    }) == 1
