"""``tercet profile``: record a torch profile of a running server's ranks from the command line.

It sends ``POST /start_profile`` with ``seconds`` (or ``num_steps``) and prints each rank's trace
file once the server has written them all (:mod:`tercet.http.control.profile_api`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tercet.errors import TercetError


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", default="http://127.0.0.1:30000", help="the server's root URL (default: %(default)s)")
    parser.add_argument("--api-key", metavar="KEY", help="send 'Authorization: Bearer KEY' (default: $TERCET_API_KEY)")
    length = parser.add_mutually_exclusive_group(required=True)
    length.add_argument("--seconds", type=float, metavar="N", help="record N seconds")
    length.add_argument("--steps", type=int, metavar="N", help="record N model steps of every rank")
    parser.add_argument("--output-dir", metavar="DIR", help="directory under the server's [server] profile_dir "
                                                            "(default: the date and time)")
    parser.add_argument("--activities", metavar="LIST", help="CPU or CPU,CUDA (default: CUDA too on a GPU rank)")
    parser.add_argument("--json", action="store_true", help="print the server's answer as JSON")


def profile_body(arguments: argparse.Namespace) -> dict:
    body = {"seconds": arguments.seconds} if arguments.seconds is not None else {"num_steps": arguments.steps}
    if arguments.output_dir is not None:
        body["output_dir"] = arguments.output_dir
    if arguments.activities is not None:
        body["activities"] = [name.strip().upper() for name in arguments.activities.split(",") if name.strip()]
    return body


def run_profile(arguments: argparse.Namespace) -> int:
    import httpx

    from tercet.http.control.profile_api import WRITE_TIMEOUT

    api_key = arguments.api_key or os.environ.get("TERCET_API_KEY")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    # The answer comes once the traces are written: after the recording, and the ranks' writing.
    timeout = (arguments.seconds or 0.0) + (WRITE_TIMEOUT if arguments.seconds is not None else 2 * WRITE_TIMEOUT)
    try:
        response = httpx.post(arguments.base_url.rstrip("/") + "/start_profile", json=profile_body(arguments),
                              headers=headers, timeout=timeout)
    except httpx.HTTPError as error:
        raise TercetError(f"cannot reach {arguments.base_url}: {error}") from None
    answer = _json_or_text(response)
    if response.status_code != 200:
        message = answer.get("error", {}).get("message") if isinstance(answer, dict) else answer
        raise TercetError(f"the server refused to profile ({response.status_code}): {message}")
    if arguments.json:
        print(json.dumps(answer, indent=2))
    else:
        print_traces(answer)
    return 0


def print_traces(answer: dict) -> None:
    for trace in answer["traces"]:
        print(f"rank {trace['rank']}: {trace['path']} ({trace.get('num_steps', 0)} steps)")
    if len(answer["traces"]) < answer.get("num_ranks", 0):
        print(f"only {len(answer['traces'])} of {answer['num_ranks']} ranks wrote a trace", file=sys.stderr)


def _json_or_text(response):
    try:
        return response.json()
    except ValueError:
        return response.text
