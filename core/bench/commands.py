"""The benchmark commands of ``tercet``: ``bench``, ``bench-offline`` and ``bench-ipc``.

Each command's arguments are declared here, and its benchmark is imported
only when it runs: ``tercet serve`` and ``tercet config show`` load none.
"""

from __future__ import annotations

import argparse
import json
import sys

from tercet.errors import TercetError


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base-url", default="http://127.0.0.1:30000", help="the server's root URL (default: %(default)s)"
    )
    parser.add_argument("--model", metavar="NAME", help="model to request (default: the first of GET /v1/models)")
    parser.add_argument("--api-key", metavar="KEY", help="send 'Authorization: Bearer KEY'")
    parser.add_argument("--num-prompts", type=positive_int, default=64, metavar="N", help="measured requests (default: 64)")
    parser.add_argument(
        "--concurrency", type=positive_int, metavar="N",
        help="requests kept in flight; with --request-rate, the most in flight",
    )
    parser.add_argument(
        "--request-rate", type=positive_float, metavar="R",
        help="send at R requests/s on average (seeded Poisson arrivals); 'inf' sends all at once",
    )
    parser.add_argument("--input-len", type=positive_int, default=128, metavar="TOKENS", help="prompt tokens (default: 128)")
    parser.add_argument("--output-len", type=positive_int, default=128, metavar="TOKENS", help="output tokens (default: 128)")
    parser.add_argument("--seed", type=int, default=0, help="seed for prompts and arrivals (default: 0)")
    parser.add_argument("--warmup", type=non_negative_int, default=0, metavar="N", help="unmeasured requests sent first")
    parser.add_argument("--tokenizer", metavar="PATH", help="tokenizer for the prompts (default: the default model's)")
    parser.add_argument(
        "--no-ignore-eos", dest="ignore_eos", action="store_false",
        help="do not send ignore_eos (for servers that reject it, such as transformers serve); "
             "requests may then end early at EOS, and the tokens they delivered are counted",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run_bench(arguments: argparse.Namespace) -> int:
    from tercet.bench.report import format_summary, summary_as_json
    from tercet.bench.serving import BenchConfig, run_serving_benchmark
    from tercet.bench.summary import summarize

    config = BenchConfig(
        base_url=arguments.base_url,
        num_prompts=arguments.num_prompts,
        input_len=arguments.input_len,
        output_len=arguments.output_len,
        concurrency=arguments.concurrency,
        request_rate=arguments.request_rate,
        model=arguments.model,
        api_key=arguments.api_key,
        seed=arguments.seed,
        warmup=arguments.warmup,
        tokenizer=arguments.tokenizer,
        ignore_eos=arguments.ignore_eos,
    )
    try:
        run = run_serving_benchmark(config)
    except KeyboardInterrupt:
        print("tercet: interrupted", file=sys.stderr)
        return 130
    summary = summarize(run.outcomes, run.duration_s)
    print(json.dumps(summary_as_json(summary, run.config), indent=2) if arguments.json else format_summary(summary, run.config))
    if summary.completed == 0:
        print(f"tercet: error: all {summary.failed} requests failed; first error: {summary.errors[0][0]}", file=sys.stderr)
        return 1
    return 0


def add_offline_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="checkpoint directory (default: the built-in default model)")
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"))
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--no-transformers", action="store_true", help="skip the transformers baseline")
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run_offline(args: argparse.Namespace) -> int:
    from tercet.bench.offline import format_offline_report, run_offline_benchmark

    try:
        result = run_offline_benchmark(
            args.model, args.dtype, args.batch_size, args.input_len, args.output_len, seed=args.seed,
            with_transformers=not args.no_transformers, warmup=not args.no_warmup, device=args.device,
            num_threads=args.threads,
        )
    except TercetError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2) if args.json else format_offline_report(result))
    return 0


def add_ipc_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--serializers", nargs="+", default=["msgpack", "pickle"])
    parser.add_argument("--transports", nargs="+", default=["ipc"], help="ipc, tcp, or any transport plugin")
    parser.add_argument("--messages", nargs="+", default=None, metavar="KIND",
                        help="message kinds to send: generate_req, decode_step (default: both)")
    parser.add_argument("--num-messages", type=int, default=2000, help="timed round trips per row")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run_ipc(args: argparse.Namespace) -> int:
    from tercet.bench.ipc_roundtrip import MESSAGE_KINDS, format_ipc_report, run_ipc_benchmark

    try:
        result = run_ipc_benchmark(args.serializers, args.transports, args.num_messages, message_kinds=args.messages or MESSAGE_KINDS)
    except TercetError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2) if args.json else format_ipc_report(result))
    return 0
