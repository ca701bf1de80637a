"""A kit for testing tercet plugins: fixtures (a pytest plugin) and the helpers behind them.

The fixtures come with tercet through its ``pytest11`` entry point (see
:mod:`tercet.testing.pytest_plugin`); a plugin's tests use them by name. The
helpers can be imported from here:

- :func:`make_request_view`, :func:`cache_holding`: a request, and a prefix cache, as a scheduling
  policy receives them;
- :class:`Ping`: a message type of a third party's, for tests of message plugins and dispatch;
- :func:`build_scheduler_harness` / :class:`SchedulerHarness`: a real Scheduler in-process;
- :func:`model_runner_for`, :func:`encoder_runner_for`, :func:`installed_model_components`:
  a model runner alone, with the installed plugins' parts;
- :class:`RunningServer`, :data:`TINY_SETTINGS`, :func:`wait_for_ranks`,
  :func:`num_running`, :func:`num_waiting`, :func:`free_port`: a real server in a subprocess;
- :func:`write_plugin_folder`: plugins a server finds by entry point without pip;
- :func:`write_tiny_llama`: the tiny random Llama checkpoint;
- :func:`write_peft_adapter`, :func:`peft_greedy`: a PEFT LoRA adapter of a checkpoint, and
  PEFT's own greedy output with it;
- :func:`attention_case`, :func:`compare_backends`: random paged steps, run through
  two attention backends and compared.

May import: scheduler, model, processes and everything below them (a test kit sits above them all).
"""

from __future__ import annotations

import importlib

# Each name's module, imported on first use: pytest imports this package in every
# run wherever tercet is installed, and most runs need none of it.
_MODULE_OF = {
    "make_request_view": "request_views",
    "cache_holding": "request_views",
    "Ping": "ping_message",
    "build_scheduler_harness": "scheduler_harness",
    "SchedulerHarness": "scheduler_harness",
    "model_runner_for": "runner_factory",
    "encoder_runner_for": "runner_factory",
    "installed_model_components": "runner_factory",
    "RunningServer": "running_server",
    "TINY_SETTINGS": "running_server",
    "free_port": "running_server",
    "num_running": "running_server",
    "num_waiting": "running_server",
    "wait_for_ranks": "running_server",
    "ServerStarter": "server_starter",
    "write_plugin_folder": "plugin_folder",
    "write_tiny_llama": "tiny_model",
    "write_peft_adapter": "lora_adapters",
    "peft_greedy": "lora_adapters",
    "attention_case": "attention_cases",
    "compare_backends": "attention_cases",
    "TINY_LLAMA_SHAPE": "tiny_model",
}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'tercet.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tercet.testing.{_MODULE_OF[name]}"), name)


def __dir__():
    return __all__
