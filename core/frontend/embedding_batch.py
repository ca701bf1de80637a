"""An embedding request's inputs, checked together before any of them is sent.

Each input runs as its own ``TokenizedEmbeddingReq`` under the id ``rid#i``
(the request's own id when it has one input), as a batch of prompts does
(:mod:`tercet.frontend.prompt_batch`). Every input is tokenized and measured before
the first is sent, so one that cannot run refuses the whole request, naming
it (``input[3]``), with nothing dispatched.
"""

from __future__ import annotations

from collections.abc import Callable

from tercet.errors import RequestError
from tercet.frontend.io_struct import EmbeddingRequest
from tercet.frontend.prompt_batch import IN_FLIGHT_LIMIT, batch_limit
from tercet.ipc.messages import TokenizedEmbeddingReq


def input_rids(rid: str, request: EmbeddingRequest) -> list[str]:
    if len(request.inputs) == 1:
        return [rid]
    return [f"{rid}#{index}" for index in range(len(request.inputs))]


def check_num_inputs(request: EmbeddingRequest, max_prompts_per_request: int, max_requests_in_flight: int) -> None:
    """Refuse more inputs than a batch of prompts may have (:func:`tercet.frontend.prompt_batch.batch_limit`), a 400."""
    limit = batch_limit(max_prompts_per_request, max_requests_in_flight)
    if len(request.inputs) <= limit:
        return
    setting = "server.max_prompts_per_request" if limit == max_prompts_per_request else IN_FLIGHT_LIMIT
    raise RequestError(
        f"input holds {len(request.inputs)} inputs, over this server's limit of {limit} per request ({setting}); "
        "split it into smaller requests",
        "input",
    )


def tokenize_inputs(request: EmbeddingRequest, tokenize: Callable[[str | list[int], str], list[int]]) -> list[list[int]]:
    """Every input's tokens, in order; ``tokenize(input, its name)`` refuses one by raising."""
    return [tokenize(value, request.input_name(index)) for index, value in enumerate(request.inputs)]


def check_input_length(num_tokens: int, max_tokens: int, name: str) -> None:
    if num_tokens == 0:
        raise RequestError(f"{name} is empty: there is nothing to embed", name)
    if num_tokens > max_tokens:
        # OpenAI refuses too long an input rather than cutting it; so does tercet.
        raise RequestError(
            f"{name} has {num_tokens} tokens, more than this model's maximum input of {max_tokens} tokens", name
        )


def input_messages(rids: list[str], input_ids: list[list[int]]) -> list[TokenizedEmbeddingReq]:
    return [TokenizedEmbeddingReq(rid, ids) for rid, ids in zip(rids, input_ids)]
