"""The common life of a child process: build, report ready or why not, serve, stop."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import traceback
from typing import Callable

from tercet.processes.context import ProcessContext, configure_logging, die_with_parent
from tercet.processes.supervisor import STACK_DUMP_SIGNAL

logger = logging.getLogger(__name__)


def run_child(
    component: str, config, ready_writer, build: Callable[[ProcessContext], tuple], log_name: str | None = None
) -> None:
    """Build the component, report ``("ready", info)`` or ``("failed", reason)``, then run it.

    ``build(context)`` returns ``(component_object, ready_info)``; the object's
    ``run_forever()`` serves until the process is stopped.
    """
    die_with_parent()
    configure_logging(log_name or component, config.server.log_level)
    # The supervisor asks a child that does not stop on SIGTERM for its stacks before killing it.
    faulthandler.register(STACK_DUMP_SIGNAL, all_threads=True)
    # SIGTERM is how the parent stops children: exit quietly and at once.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        context = ProcessContext.create(config)
        component_object, ready_info = build(context)
    except BaseException as error:  # report every start-up failure to the parent
        logger.error("failed to start:\n%s", traceback.format_exc())
        ready_writer.send(("failed", f"{type(error).__name__}: {error}"))
        ready_writer.close()
        sys.exit(1)
    ready_writer.send(("ready", ready_info))
    ready_writer.close()

    def stop(*_):
        try:
            context.plugin_manager.hook.tercet_shutdown(component=component)
            # What the component keeps past the process (the scheduler: its prefix cache, down to a file tier).
            getattr(component_object, "before_exit", lambda: None)()
        finally:
            os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    context.plugin_manager.hook.tercet_startup(component=component, config=config)
    try:
        component_object.run_forever()
    except BaseException:
        logger.error("%s crashed:\n%s", component, traceback.format_exc())
        sys.exit(1)
