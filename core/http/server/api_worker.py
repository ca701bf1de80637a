"""One API worker process (``server.api_workers > 1``): the HTTP app and a TokenizerManager.

It listens on the server's port beside the other workers (SO_REUSEPORT), and
tells the main process it is ready once listening, or why it could not start
(the tokenizer did not load, the port could not be bound), which then names
it. The main process tells it over a pipe which workers there are and when a
child died; SIGTERM drains it, as it drains a single API process.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import sys
import threading
import traceback

from tercet.http.server.api_process import serve_api
from tercet.ipc.result_routes import ApiWorker
from tercet.model_abilities import ModelAbilities
from tercet.processes.context import ProcessContext, configure_logging, die_with_parent
from tercet.processes.supervisor import STACK_DUMP_SIGNAL
from tercet.processes.title import set_process_title

logger = logging.getLogger(__name__)


def run_api_worker_process(config, port_args, worker: ApiWorker, context_len: int, abilities: dict,
                           from_main, ready_writer) -> None:
    """``from_main``: the pipe the main process sends ``("workers", {number: pid})`` and
    ``("child_died", name, reason)`` on; ``ready_writer``: where readiness or failure goes."""
    die_with_parent()
    set_process_title(worker.title)
    configure_logging(f"api worker {worker.number}", config.server.log_level)
    faulthandler.register(STACK_DUMP_SIGNAL, all_threads=True)
    # Ctrl-C reaches every process of the group: the main process alone decides, and sends SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    readiness = _Readiness(ready_writer)
    try:
        context = ProcessContext.create(config)
        exit_code = asyncio.run(serve_api(
            context, port_args, lambda on_death: _watch_main(from_main, on_death, readiness), context_len,
            ModelAbilities.from_dict(abilities), worker=worker, on_listening=readiness.ready,
            stop_signals=(signal.SIGTERM,),
        ))
    except BaseException as error:  # every start-up failure goes to the main process
        logger.error("failed:\n%s", traceback.format_exc())
        readiness.failed(f"{type(error).__name__}: {error}")
        sys.exit(1)
    sys.exit(exit_code)


class _Readiness:
    def __init__(self, ready_writer):
        self.ready_writer = ready_writer
        self.is_reported = False
        self.manager = None

    def ready(self, tokenizer_manager) -> None:
        self.manager = tokenizer_manager
        self._report(("ready", {"pid": os.getpid()}))

    def failed(self, reason: str) -> None:
        if not self.is_reported:
            self._report(("failed", reason))

    def _report(self, status: tuple) -> None:
        self.is_reported = True
        self.ready_writer.send(status)
        self.ready_writer.close()


def _watch_main(from_main, on_death, readiness: _Readiness) -> None:
    def listen():
        while True:
            try:
                message = from_main.recv()
            except (EOFError, OSError):  # the main process is gone: die_with_parent ends this one
                return
            if message[0] == "workers" and readiness.manager is not None:
                readiness.manager.worker_pids = dict(message[1])
            elif message[0] == "child_died":
                on_death(message[1], message[2])

    threading.Thread(target=listen, name="tercet-main-process", daemon=True).start()
