"""Entry point of a scheduler child process."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from tercet.model.cpu_threads import workers_wait_awake_through_a_step
from tercet.native.cpu import limit_torch_to
from tercet.parallel.topology import scheduler_name
from tercet.processes.child import run_child
from tercet.processes.title import set_process_title


def process_title(rank: int, tp_rank: int) -> str:
    """What ``ps`` shows for a scheduler process, naming its ranks."""
    return f"tercet scheduler dp{rank} tp{tp_rank}"


def run_scheduler_process(config, port_args, rank, heartbeat, tp_rank, ready_writer) -> None:
    # First: OpenMP and torch's kernels read their settings once, when torch loads.
    workers_wait_awake_through_a_step()
    limit_torch_to(config.model.cpu_isa)
    set_process_title(process_title(rank, tp_rank))
    log_name = scheduler_name(rank, tp_rank, config.scheduler.dp_size, config.parallel.tp_size)
    run_child(
        "scheduler", config, ready_writer, lambda context: _build(context, port_args, rank, heartbeat, tp_rank),
        log_name,
    )


def build_model_runner(context, tp=None):
    """The model runner a scheduler uses, as the config describes it (``tp``: its tensor-parallel place):
    a :class:`ModelRunner` for a decoder, an :class:`EncoderRunner` for an encoder-only model."""
    from tercet.formats.checkpoint import open_checkpoint
    from tercet.model.architecture import choose_architecture
    from tercet.model.chosen_components import model_components
    from tercet.model.encoder_runner import EncoderRunner
    from tercet.model.model_runner import ModelRunner
    from tercet.model.tensor_parallel import SINGLE

    config = context.config
    tp = SINGLE if tp is None else tp
    components = model_components(context)
    if not choose_architecture(open_checkpoint(config.model.path).config, components.architectures).can_generate:
        return EncoderRunner(config.model, components, tp=tp)
    return ModelRunner(
        config.model, config.cache, components, max_running_requests=config.scheduler.max_running_requests, tp=tp
    )


def run_kernels_at(cpu_isa: str) -> None:
    """The instruction-set level of this process's kernels (``model.cpu_isa``), before the first is loaded;
    a level the CPU lacks is a :class:`ConfigError` naming it."""
    from tercet.errors import ConfigError
    from tercet.native.cpu import UnsupportedLevel, describe, use_level

    try:
        use_level(cpu_isa)
    except UnsupportedLevel as error:
        raise ConfigError(f"model.cpu_isa: {error}") from None
    logging.getLogger(__name__).info("native kernels at %s", describe())


def _build(context, port_args, rank, heartbeat, tp_rank=0):
    from tercet.model.cpu_threads import same_results_at_any_thread_count
    from tercet.model_abilities import ModelAbilities
    from tercet.parallel.tp_group import join_tensor_parallel_group
    from tercet.scheduler.assembly import build_scheduler
    from tercet.tokenizer.loading import load_tokenizer

    config = context.config
    run_kernels_at(config.model.cpu_isa)
    same_results_at_any_thread_count()  # the thread count follows the free cores (model.cpu_threads)
    with ThreadPoolExecutor(1, thread_name_prefix="tercet-tokenizer-ahead") as ahead:
        # The tokenizer (it decodes output tails to detect stop strings) loads while the weights do.
        tokenizer = ahead.submit(load_tokenizer, config.model.path)
        model_runner = build_model_runner(context, join_tensor_parallel_group(config, port_args, rank, tp_rank))
        scheduler = build_scheduler(
            context, port_args, model_runner, tokenizer.result(), rank=rank, heartbeat=heartbeat
        )
    weights = model_runner.weights_info
    logging.getLogger(__name__).info(
        "model loaded: %s (weights %s, %s MiB; activations %s on %s), KV cache of %d tokens in %s (%s MiB)%s",
        config.model.path, weights["weight_format"], weights["weight_bytes"] >> 20, model_runner.dtype,
        model_runner.device, weights["max_total_tokens"], weights["kv_dtype"] or "no dtype",
        weights["kv_cache_bytes"] >> 20,
        "" if model_runner.pooling is None else f"; embeddings pooled by {model_runner.pooling.method}",
    )
    # "input": where TP rank 0 bound the rank's input, its port filled in (other nodes bind on ``*``).
    ready_info = {"context_len": model_runner.context_len, **ModelAbilities.of(model_runner).as_dict(),
                  "input": scheduler.receiver.endpoint if scheduler.receiver is not None else None}
    return scheduler, ready_info
