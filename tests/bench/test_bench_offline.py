"""The offline benchmark on the tiny model: figures are sane and fp32 greedy equals transformers."""

from __future__ import annotations

import json

import pytest

from tercet.bench.offline import (
    format_offline_report,
    run_offline_benchmark,
    synthetic_prompts,
)
from tercet.cli import main as tercet_main

BATCH, INPUT_LEN, OUTPUT_LEN = 4, 16, 8


@pytest.fixture(scope="module")
def result(tiny_llama_dir):
    return run_offline_benchmark(
        str(tiny_llama_dir), "float32", BATCH, INPUT_LEN, OUTPUT_LEN, device="cpu", progress=False, return_outputs=True,
    )


def test_result_has_config_both_engines_and_ratios(result):
    assert set(result) >= {"config", "tercet", "transformers", "ratios", "greedy_match"}
    config = result["config"]
    assert (config["batch_size"], config["input_len"], config["output_len"]) == (BATCH, INPUT_LEN, OUTPUT_LEN)
    assert config["resolved_dtype"] == "float32" and config["device"] == "cpu"
    assert result["ratios"]["engine_vs_transformers"] > 0
    json.dumps(result)  # JSON-able as it is


@pytest.mark.parametrize("engine", ["tercet", "transformers"])
def test_each_engine_produces_every_token_with_positive_figures(result, engine):
    figures = result[engine]
    assert figures["num_requests"] == BATCH
    assert figures["num_prompt_tokens"] == BATCH * INPUT_LEN
    assert figures["num_output_tokens"] == BATCH * OUTPUT_LEN
    assert [len(ids) for ids in figures["output_ids"]] == [OUTPUT_LEN] * BATCH
    # One forward per new token after the first, for the whole batch at once.
    assert figures["num_decode_steps"] == OUTPUT_LEN - 1
    for key in ("output_tokens_per_s", "prefill_tokens_per_s", "decode_tokens_per_s",
                "mean_decode_step_ms", "mean_itl_ms", "mean_ttft_ms"):
        assert figures[key] > 0, key
    assert figures["prefill_s"] + figures["decode_s"] == pytest.approx(figures["total_s"])


def test_tercet_reports_its_matmuls_alone_as_a_share_of_the_decode_step(result):
    figures = result["tercet"]
    assert figures["num_matmuls"] > 0 and figures["matmul_weight_bytes"] > 0
    assert figures["matmul_share_of_decode_step"] == pytest.approx(
        figures["matmul_ms"] / figures["mean_decode_step_ms"])
    assert "matmul_ms" not in result["transformers"]


def test_tercet_runs_the_batch_without_retracting(result):
    assert result["tercet"]["num_retractions"] == 0


def test_float32_greedy_outputs_equal_transformers(result):
    match = result["greedy_match"]
    assert match["expected_to_match"]
    assert result["tercet"]["output_ids"] == result["transformers"]["output_ids"]
    assert match == {"all_match": True, "num_matching_requests": BATCH, "num_requests": BATCH,
                     "first_mismatch": None, "expected_to_match": True}


def test_report_names_every_figure(result):
    report = format_offline_report(result)
    for label in ("output tok/s", "prefill (s)", "decode step (ms)", "mean ITL (ms)", "identical, 4/4"):
        assert label in report


def test_prompts_are_seeded_ordinary_ids_of_one_length(tiny_llama_dir):
    from tercet.tokenizer.loading import load_tokenizer

    prompts = synthetic_prompts(tiny_llama_dir, 3, 10, seed=7)
    assert prompts == synthetic_prompts(tiny_llama_dir, 3, 10, seed=7)
    assert prompts != synthetic_prompts(tiny_llama_dir, 3, 10, seed=8)
    special = set(load_tokenizer(str(tiny_llama_dir)).all_special_ids)
    assert all(len(prompt) == 10 and not special & set(prompt) for prompt in prompts)


def test_command_line_prints_json_without_the_baseline(tiny_llama_dir, capsys):
    code = tercet_main(["bench-offline", "--model", str(tiny_llama_dir), "--dtype", "float32", "--device", "cpu",
                        "--batch-size", "2", "--input-len", "8", "--output-len", "3", "--no-transformers", "--no-warmup",
                        "--json"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["transformers"] is None and printed["greedy_match"] is None
    assert printed["tercet"]["num_output_tokens"] == 6


def test_command_line_rejects_an_empty_prompt(tiny_llama_dir, capsys):
    assert tercet_main(["bench-offline", "--model", str(tiny_llama_dir), "--input-len", "0", "--no-transformers"]) == 1
    assert "input_len must be at least 1" in capsys.readouterr().err


def test_command_line_rejects_more_tokens_than_the_context(tiny_llama_dir, capsys):
    # The tiny model attends over 1024 positions.
    assert tercet_main(["bench-offline", "--model", str(tiny_llama_dir), "--device", "cpu", "--batch-size", "1",
                        "--input-len", "1000", "--output-len", "100", "--no-transformers", "--no-warmup"]) == 1
    assert "exceeds the model's context of 1024 tokens" in capsys.readouterr().err
