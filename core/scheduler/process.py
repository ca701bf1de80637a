"""Entry point of a scheduler child process."""

from __future__ import annotations

import logging

from tercet.child_process import run_child


def run_scheduler_process(config, port_args, rank, heartbeat, ready_writer) -> None:
    log_name = "scheduler" if config.scheduler.dp_size == 1 else f"scheduler-{rank}"
    run_child("scheduler", config, ready_writer, lambda context: _build(context, port_args, rank, heartbeat), log_name)


def build_model_runner(context):
    """The model runner a scheduler uses, as the config describes it."""
    from tercet.model.model_runner import ModelRunner

    config = context.config
    linear_methods = context.registries.linear_methods
    return ModelRunner(
        model_path=config.model.path,
        dtype=config.model.dtype,
        device=config.model.device,
        attention_backend_factory=context.registries.attention_backends.get(config.attention.backend),
        max_total_tokens=config.cache.max_total_tokens,
        page_size=config.cache.page_size,
        max_running_requests=config.scheduler.max_running_requests,
        quantization=config.model.quantization,
        kv_cache_memory=config.model.kv_cache_memory,
        dense_from_rows=config.model.dense_from_rows,
        linear_methods={name: linear_methods.get(name) for name in linear_methods.names()},
    )


def _build(context, port_args, rank, heartbeat):
    from tercet.scheduler.scheduler import Scheduler
    from tercet.tokenizer import load_tokenizer

    config = context.config
    model_runner = build_model_runner(context)
    # The tokenizer decodes output tails to detect stop strings.
    scheduler = Scheduler(
        context, port_args, model_runner, load_tokenizer(config.model.path), rank=rank, heartbeat=heartbeat
    )
    logging.getLogger(__name__).info(
        "model loaded: %s (weights %s, %s MiB; activations %s on %s), KV cache of %d tokens (%s MiB)",
        config.model.path, model_runner.load_report.weight_format, model_runner.load_report.weight_bytes >> 20,
        model_runner.dtype, model_runner.device, model_runner.max_total_tokens, model_runner.kv_cache.num_bytes >> 20,
    )
    ready_info = {"context_len": model_runner.context_len}
    return scheduler, ready_info
