"""The ``tercet`` command: serve, config show, plugins, plugin new, bench, bench-offline, bench-ipc, profile."""

from __future__ import annotations

import argparse
import json
import sys

from tercet.bench.commands import (
    add_bench_arguments,
    add_ipc_arguments,
    add_offline_arguments,
    run_bench,
    run_ipc,
    run_offline,
)
from tercet.config import (
    DTYPE_NAMES,
    check_api_key,
    check_plugin_choices,
    load_config,
    parse_set_options,
)
from tercet.config_display import config_as_toml
from tercet.errors import TercetError
from tercet.formats.default_model import resolve_model_path
from tercet.formats.weight_formats import describe_weights
from tercet.http.control.profile_command import add_profile_arguments, run_profile
from tercet.native.cpu import UnsupportedLevel, check_level, runnable_levels
from tercet.plugin_host.listing import describe_plugins, format_plugins
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.plugin_host.skeleton import write_skeleton


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML config file (also $TERCET_CONFIG)")
    parser.add_argument("--model", metavar="PATH", help="Hugging Face Llama-family checkpoint directory or .gguf file")
    parser.add_argument(
        "--quantization", metavar="METHOD",
        help="linear method: auto (the checkpoint's own format), none (dense), int8, q4_0, q4_1, q8_0",
    )
    parser.add_argument("--dtype", choices=["auto", *DTYPE_NAMES])
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--api-workers", type=int, metavar="N", help="API worker processes serving HTTP on one port")
    parser.add_argument("--served-model-name", metavar="NAME", help="model name shown by /v1/models")
    parser.add_argument("--api-key", metavar="KEY", help="require 'Authorization: Bearer KEY'")
    parser.add_argument("--tp-size", type=int, metavar="N", help="tensor-parallel processes per data-parallel rank")
    parser.add_argument("--dp-size", type=int, metavar="N", help="data-parallel ranks (model replicas)")
    parser.add_argument("--nnodes", type=int, metavar="N", help="hosts the workers are spread over")
    parser.add_argument("--node-rank", type=int, metavar="R", help="this host's place among them (0 serves the API)")
    parser.add_argument(
        "--dist-init-addr", metavar="HOST:PORT", help="node 0's address, where the nodes meet (needed with --nnodes)"
    )
    parser.add_argument(
        "--lora", dest="lora_adapters", action="append", default=[], metavar="NAME=PATH",
        help="serve the PEFT adapter in directory PATH under NAME (repeatable)",
    )
    parser.add_argument("--otlp-traces-endpoint", metavar="URL",
                        help="export a span per request to this OTLP/HTTP endpoint (needs tercet[otel])")
    parser.add_argument(
        "--set", dest="assignments", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="any config value, e.g. --set scheduler.max_running_requests=8 (repeatable)",
    )


def config_from_arguments(arguments: argparse.Namespace):
    if arguments.api_key is not None:
        check_api_key(arguments.api_key, "--api-key")
    overrides = parse_set_options(arguments.assignments)
    direct = {
        ("model", "path"): arguments.model,
        ("model", "dtype"): arguments.dtype,
        ("model", "quantization"): arguments.quantization,
        ("model", "served_model_name"): arguments.served_model_name,
        ("server", "host"): arguments.host,
        ("server", "port"): arguments.port,
        ("server", "api_key"): arguments.api_key,
        ("server", "api_workers"): arguments.api_workers,
        ("parallel", "tp_size"): arguments.tp_size,
        ("scheduler", "dp_size"): arguments.dp_size,
        ("parallel", "nnodes"): arguments.nnodes,
        ("parallel", "node_rank"): arguments.node_rank,
        ("parallel", "dist_init_addr"): arguments.dist_init_addr,
        ("observability", "otlp_endpoint"): arguments.otlp_traces_endpoint,
    }
    for (section, key), value in direct.items():
        if value is not None:
            overrides.setdefault(section, {})[key] = value
    if arguments.lora_adapters:
        overrides.setdefault("lora", {})["adapters"] = list(arguments.lora_adapters)
    return load_config(arguments.config, overrides=overrides)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tercet", description="A plugin-based LLM serving runtime.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API")
    add_config_arguments(serve)

    config = commands.add_parser("config", help="configuration commands")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    show = config_commands.add_parser("show", help="print the resolved configuration as TOML")
    add_config_arguments(show)

    plugins = commands.add_parser("plugins", help="list installed plugins and what they register")
    plugins.add_argument("--json", action="store_true", help="print JSON")
    # The configuration says which plugins are disabled.
    add_config_arguments(plugins)

    plugin = commands.add_parser("plugin", help="plugin authoring commands")
    plugin_commands = plugin.add_subparsers(dest="plugin_command", required=True)
    new = plugin_commands.add_parser(
        "new", help="write a pip-installable plugin package skeleton for a kind",
        description="Write a pip-installable package for a new plugin: pyproject.toml with its entry point, "
                    "the module, a README and tests using tercet.testing's fixtures.",
    )
    new.add_argument("kind", metavar="KIND", help="the kind of component, e.g. scheduling-policy (an unknown one lists them)")
    new.add_argument("name", metavar="NAME", help="the component's name, e.g. shortest-first")
    new.add_argument("--directory", metavar="DIR", default=".", help="where to create NAME/ (default: here)")

    bench = commands.add_parser(
        "bench", help="benchmark an OpenAI-compatible server: throughput, TTFT, inter-token latency"
    )
    add_bench_arguments(bench)
    bench_offline = commands.add_parser(
        "bench-offline", help="tercet's engine (no HTTP, no IPC) against the plain transformers forward, same batch"
    )
    add_offline_arguments(bench_offline)
    bench_ipc = commands.add_parser("bench-ipc", help="round trips per second over the IPC fabric, per serializer")
    add_ipc_arguments(bench_ipc)
    profile = commands.add_parser(
        "profile", help="record a torch profile of a running server's ranks (POST /start_profile)"
    )
    add_profile_arguments(profile)
    return parser


def serve(arguments: argparse.Namespace) -> int:
    # The server's own modules load only for the command that serves.
    from tercet.frontend.request_traces import check_tracing_installed
    from tercet.launch import launch_server

    config = config_from_arguments(arguments)
    # Before anything starts: request traces asked for without the otel extra.
    check_tracing_installed(config.observability)
    return launch_server(config)


def show_config(arguments: argparse.Namespace) -> int:
    config = config_from_arguments(arguments)
    plugin_manager = create_plugin_manager(disabled=config.disabled_plugins)
    check_plugin_choices(config, PluginRegistries.from_plugin_manager(plugin_manager))
    print(config_as_toml(config))
    print(describe_weights(resolve_model_path(config.model.path), config.model.quantization))
    return 0


def list_plugins(arguments: argparse.Namespace) -> int:
    config = config_from_arguments(arguments)
    described = describe_plugins(create_plugin_manager(disabled=config.disabled_plugins))
    if arguments.json:
        print(json.dumps(described, indent=2))
        return 0
    print(f"native kernels: {native_level_line(config.model.cpu_isa)}")
    print(format_plugins(described))
    return 0


def native_level_line(cpu_isa: str) -> str:
    """The level the scheduler's C kernels would run at under ``model.cpu_isa``, and what this CPU runs."""
    runs = ", ".join(level.name for level in runnable_levels())
    try:
        level = check_level(cpu_isa)
    except UnsupportedLevel as error:
        return f"model.cpu_isa refused: {error}"
    how = "model.cpu_isa" if cpu_isa != "auto" else "this CPU's best"
    return f"level {level.name} ({level.summary}; {how}); this CPU runs {runs}"


def new_plugin(arguments: argparse.Namespace) -> int:
    target = write_skeleton(arguments.kind, arguments.name, arguments.directory)
    print(f"wrote {target}; next: pip install -e {target} && python -m pytest {target}")
    return 0


COMMANDS = {
    "serve": serve,
    "config": show_config,
    "plugins": list_plugins,
    "plugin": new_plugin,
    "bench": run_bench,
    "bench-offline": run_offline,
    "bench-ipc": run_ipc,
    "profile": run_profile,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    if arguments.command == "bench" and arguments.concurrency is None and arguments.request_rate is None:
        parser.error("bench needs --concurrency N, --request-rate R, or both")
    try:
        return COMMANDS[arguments.command](arguments)
    except TercetError as error:
        print(f"tercet: error: {error}", file=sys.stderr)
        return 2 if arguments.command == "config" else 1


if __name__ == "__main__":
    sys.exit(main())
