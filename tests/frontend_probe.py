"""Run by test_frontend_imports.py in a fresh interpreter: the API process and the detokenizer child,
built as ``tercet serve`` builds them, one output through the detokenizer, and what each has loaded.

Prints one JSON object: ``{"server": [...], "detokenizer": [...]}``, the heavy modules found in
each process (the server's from ``sys.modules``, the child's from the files it has mapped).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

HEAVY_MODULES = ("torch", "transformers")


def mapped_heavy_modules(pid: int) -> list[str]:
    """The heavy packages a process has native code of mapped (importing torch maps libtorch)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return [name for name in HEAVY_MODULES if f"/site-packages/{name}/" in maps]


def main(model_path: str) -> dict:
    import zmq

    import tercet.cli  # noqa: F401 -- the `tercet serve` entry, imported as the command imports it
    from tercet.config import load_config
    from tercet.detokenizer.detokenizer_manager import run_detokenizer_process
    from tercet.frontend.tokenizer_manager import TokenizerManager
    from tercet.http.server.app import create_app
    from tercet.ipc.channels import MessageSender
    from tercet.ipc.messages import BatchTokenIDOutput, FinishReason
    from tercet.ipc.port_args import PortArgs
    from tercet.launch import resolve_model
    from tercet.processes.context import ProcessContext
    from tercet.processes.supervisor import ChildSupervisor
    from tercet.tokenizer.loading import load_tokenizer

    config = resolve_model(load_config(environ={}, overrides={"model": {"path": model_path}}))
    context = ProcessContext.create(config)  # every installed plugin, as in the server
    port_args = PortArgs.create(context.create_transport())
    supervisor = ChildSupervisor()
    manager = None
    try:
        supervisor.start("detokenizer", run_detokenizer_process, (config, port_args), timeout=120)
        tokenizer = load_tokenizer(config.model.path)
        manager = TokenizerManager(context, port_args, tokenizer, config.model.served_model_name, 1024)
        create_app(manager)
        # One step's output through the child, so what it imports to decode is loaded too.
        token_ids = tokenizer.encode("Hello, world", add_special_tokens=False)
        step = BatchTokenIDOutput(
            rids=["probe"], new_token_ids=[token_ids], finished_reasons=[FinishReason("length")],
            prompt_tokens=[1], completion_tokens=[len(token_ids)], detokenize_params=[None],
            output_logprobs=[None], prompt_logprobs=[None], cached_tokens=[0],
        )
        sender = MessageSender(zmq.Context.instance(), port_args.detokenizer_input, context.create_serializer())
        sender.send(step)
        output = asyncio.run(asyncio.wait_for(manager.receiver.receive(), 60))
        sender.close()
        assert output.text_deltas == ["Hello, world"], output
        (child,) = supervisor.children
        return {
            "server": [name for name in HEAVY_MODULES if name in sys.modules],
            "detokenizer": mapped_heavy_modules(child.process.pid),
        }
    finally:
        if manager is not None:
            manager.close()
        supervisor.stop_all()
        port_args.remove_runtime_dir()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
