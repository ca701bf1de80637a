"""Entry point of a scheduler child process."""

from __future__ import annotations

import logging

from tercet.child_process import run_child
from tercet.process_title import set_process_title


def scheduler_name(rank: int, tp_rank: int, dp_size: int, tp_size: int) -> str:
    """The process's name in logs and failures: ``scheduler``, ``scheduler-1``, ``scheduler-1-tp0``…"""
    name = "scheduler" if dp_size == 1 else f"scheduler-{rank}"
    return name if tp_size == 1 else f"{name}-tp{tp_rank}"


def process_title(rank: int, tp_rank: int) -> str:
    """What ``ps`` shows for a scheduler process, naming its ranks."""
    return f"tercet scheduler dp{rank} tp{tp_rank}"


def run_scheduler_process(config, port_args, rank, heartbeat, tp_rank, ready_writer) -> None:
    set_process_title(process_title(rank, tp_rank))
    log_name = scheduler_name(rank, tp_rank, config.scheduler.dp_size, config.parallel.tp_size)
    run_child(
        "scheduler", config, ready_writer, lambda context: _build(context, port_args, rank, heartbeat, tp_rank),
        log_name,
    )


def join_tensor_parallel_group(config, port_args, rank: int, tp_rank: int):
    """This process's place in its data-parallel rank's TP group (:data:`SINGLE` without one)."""
    from datetime import timedelta

    from tercet.config_description import describe_rank
    from tercet.model.group_agreement import check_group_agrees
    from tercet.model.tensor_parallel import SINGLE, TensorParallel
    from tercet.rendezvous import join_group_through_store

    tp_size = config.parallel.tp_size
    if tp_size == 1:
        return SINGLE
    import torch.distributed as dist

    backend = "nccl" if config.model.device.startswith("cuda") else "gloo"
    # Peers wait in a broadcast while rank 0 is idle; it speaks every few seconds.
    timeout = timedelta(seconds=config.server.startup_timeout + 600)
    if port_args.tp_store is not None:
        # The group may span nodes: its ranks meet at node 0's rendezvous store.
        join_group_through_store(port_args.tp_store, f"tp-group-{rank}", tp_rank, tp_size, backend, timeout)
    else:
        # A file in the instance's private runtime directory: the ranks meet there, on this host.
        dist.init_process_group(
            backend, init_method=f"file://{port_args.runtime_dir}/tp-group-{rank}", rank=tp_rank, world_size=tp_size,
            timeout=timeout,
        )
    tp = TensorParallel(tp_rank, tp_size)
    check_group_agrees(describe_rank(config), tp)
    return tp


def build_model_runner(context, tp=None):
    """The model runner a scheduler uses, as the config describes it (``tp``: its tensor-parallel place):
    a :class:`ModelRunner` for a decoder, an :class:`EncoderRunner` for an encoder-only model."""
    from tercet.model.architecture import choose_architecture
    from tercet.model.checkpoint import open_checkpoint
    from tercet.model.model_runner import ModelRunner
    from tercet.model.tensor_parallel import SINGLE

    config = context.config
    tp = SINGLE if tp is None else tp
    linear_methods = context.registries.linear_methods
    architectures = context.registries.model_architectures
    architectures = {name: architectures.get(name) for name in architectures.names()}
    if not choose_architecture(open_checkpoint(config.model.path).config, architectures).can_generate:
        from tercet.model.encoder_runner import EncoderRunner

        return EncoderRunner(
            config.model.path, architectures, dtype=config.model.dtype, device=config.model.device,
            pooling=config.model.pooling, quantization=config.model.quantization, tp=tp,
        )
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
        architectures=architectures,
        tp=tp,
        pooling=config.model.pooling,
    )


def _build(context, port_args, rank, heartbeat, tp_rank=0):
    from tercet.model_abilities import ModelAbilities
    from tercet.scheduler.scheduler import Scheduler
    from tercet.tokenizer import load_tokenizer

    config = context.config
    model_runner = build_model_runner(context, join_tensor_parallel_group(config, port_args, rank, tp_rank))
    # The tokenizer decodes output tails to detect stop strings.
    scheduler = Scheduler(
        context, port_args, model_runner, load_tokenizer(config.model.path), rank=rank, heartbeat=heartbeat
    )
    weights = model_runner.weights_info
    logging.getLogger(__name__).info(
        "model loaded: %s (weights %s, %s MiB; activations %s on %s), KV cache of %d tokens (%s MiB)%s",
        config.model.path, weights["weight_format"], weights["weight_bytes"] >> 20, model_runner.dtype,
        model_runner.device, weights["max_total_tokens"], weights["kv_cache_bytes"] >> 20,
        "" if model_runner.pooling is None else f"; embeddings pooled by {model_runner.pooling.method}",
    )
    # "input": where TP rank 0 bound the rank's input, its port filled in (other nodes bind on ``*``).
    ready_info = {"context_len": model_runner.context_len, **ModelAbilities.of(model_runner).as_dict(),
                  "input": scheduler.receiver.endpoint if scheduler.receiver is not None else None}
    return scheduler, ready_info
