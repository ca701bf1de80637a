"""Refusing an output constraint too large to compile, before any of it reaches a scheduler.

How long a grammar takes to compile grows with its size (a JSON Schema of
10,000 properties takes seconds of a core), and a compile cannot be stopped
once it runs, only abandoned. So the API refuses a constraint over
``[grammar] max_constraint_bytes`` with a 400 naming the limit; every request
that passes is cheap to refuse later, by ``[grammar] compile_timeout``.
"""

from __future__ import annotations

from tercet.errors import RequestError
from tercet.sampling_params import SamplingParams


def check_constraint_size(params: SamplingParams, max_bytes: int) -> None:
    constraint = params.constraint
    if constraint is None:
        return
    kind, text = constraint
    num_bytes = len(text.encode("utf-8", "surrogatepass"))
    if num_bytes > max_bytes:
        raise RequestError(
            f"the {kind} is {num_bytes} bytes, over this server's limit of {max_bytes} bytes "
            "(grammar.max_constraint_bytes)",
            kind,
        )
