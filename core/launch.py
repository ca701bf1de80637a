"""Launching a server: endpoints, children in order, then the API.

Order: PortArgs names every endpoint -> the scheduler binds and reports ready
-> the detokenizer binds and reports ready -> the TokenizerManager connects ->
HTTP listens. Any failure on the way, or a child dying later, stops
everything with a message naming the child, a non-zero exit and no process
left behind; with ``server.on_child_failure = "unhealthy"`` a child dying later
instead leaves the server up, answering 503 until it is stopped (then exiting 1).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal

from tercet.config import TercetConfig
from tercet.detokenizer_manager import run_detokenizer_process
from tercet.errors import TercetError
from tercet.plugin_manager import collect_pairs
from tercet.port_args import PortArgs
from tercet.process_context import ProcessContext, configure_logging
from tercet.scheduler.process import run_scheduler_process
from tercet.supervisor import ChildFailed, ChildSupervisor

logger = logging.getLogger("tercet.launch")


def resolve_model(config: TercetConfig) -> TercetConfig:
    """Fix the model directory (converting the default model once) and the served name."""
    from tercet.model.default_model import resolve_model_path

    model_path = resolve_model_path(config.model.path)
    return config.replace(
        "model", path=str(model_path), served_model_name=config.model.served_model_name or model_path.name
    )


def launch_server(config: TercetConfig) -> int:
    """Run a server until SIGINT/SIGTERM (exit code 0) or a failure (non-zero)."""
    configure_logging("server", config.server.log_level)
    context = ProcessContext.create(config)
    config = resolve_model(config)
    context = dataclasses.replace(context, config=config)
    serializer_class = context.registries.serializers.get(config.ipc.serializer)
    if getattr(serializer_class, "is_trusted_only", False):
        logger.warning(
            "ipc.serializer = %r can run code chosen by anyone able to write to the IPC endpoints; "
            "use it only when every process on them is trusted", config.ipc.serializer,
        )
    port_args = PortArgs.create(context.create_transport(), dp_size=config.scheduler.dp_size)
    logger.info(
        "IPC endpoints: scheduler %s, detokenizer %s, tokenizer %s",
        ", ".join(port_args.scheduler_inputs), port_args.detokenizer_input, port_args.tokenizer_input,
    )
    supervisor = ChildSupervisor()
    try:
        timeout = config.server.startup_timeout
        dp_size = config.scheduler.dp_size
        for rank in range(dp_size):
            name = "scheduler" if dp_size == 1 else f"scheduler-{rank}"
            scheduler_info = supervisor.start(name, run_scheduler_process, (config, port_args, rank), timeout)
        supervisor.start("detokenizer", run_detokenizer_process, (config, port_args), timeout)
        return asyncio.run(serve_api(context, port_args, supervisor, scheduler_info["context_len"]))
    except ChildFailed as failure:
        logger.error("%s; stopping the server", failure)
        return 1
    finally:
        supervisor.stop_all()
        port_args.remove_runtime_dir()


async def serve_api(context: ProcessContext, port_args: PortArgs, supervisor: ChildSupervisor, context_len: int) -> int:
    from tercet.http.app import create_app
    from tercet.http.server import serve_http
    from tercet.tokenizer import load_tokenizer
    from tercet.tokenizer_manager import TokenizerManager

    config = context.config
    tokenizer_manager = TokenizerManager(
        context, port_args, load_tokenizer(config.model.path), config.model.served_model_name, context_len
    )
    tokenizer_manager.start()
    app = create_app(
        tokenizer_manager,
        api_key=config.server.api_key,
        extra_routes=collect_pairs(context.plugin_manager, "register_http_routes"),
        health_generate_timeout=config.server.health_generate_timeout,
    )

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    exit_code = 0
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, stop.set)

    def on_child_death(name: str, reason: str) -> None:
        nonlocal exit_code
        exit_code = 1
        tokenizer_manager.unhealthy_reason = f"{name} process died ({reason})"
        if config.server.on_child_failure == "unhealthy":
            # Stay up so the failure is visible: health checks and generation answer 503.
            logger.error(
                "%s process died (%s); the server stays up and answers 503 (server.on_child_failure = unhealthy)",
                name, reason,
            )
            try:
                loop.call_soon_threadsafe(tokenizer_manager.fail_requests_in_flight, tokenizer_manager.unhealthy_reason)
            except RuntimeError:  # the loop already closed
                pass
            return
        logger.error("%s process died (%s); stopping the server", name, reason)
        try:
            loop.call_soon_threadsafe(stop.set)
        except RuntimeError:  # the loop already closed: the server is stopping anyway
            pass

    supervisor.watch(on_child_death)
    context.plugin_manager.hook.tercet_startup(component="server", config=config)
    try:
        await serve_http(app, config.server.host, config.server.port, shutdown_trigger=stop.wait)
    except OSError as error:
        raise TercetError(f"cannot listen on {config.server.host}:{config.server.port}: {error}") from None
    finally:
        context.plugin_manager.hook.tercet_shutdown(component="server")
        tokenizer_manager.close()
    return exit_code
