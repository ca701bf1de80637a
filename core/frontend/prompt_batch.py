"""A request's prompts, checked together before any of them is sent.

A batch (a list prompt) runs as one ``TokenizedGenerateReq`` per prompt, under
the id ``rid#p``: ``/abort_request`` with the request's own id then reaches
them all, as it reaches the ``rid#i`` of a request with n > 1. Every prompt is
tokenized and measured before the first is sent, so one that cannot run
refuses the whole request, naming it (``prompt[3]``), with nothing dispatched.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable

from tercet.errors import RequestError
from tercet.frontend.io_struct import GenerateRequest
from tercet.ipc.messages import TokenizedGenerateReq
from tercet.sampling_params import SamplingParams

IN_FLIGHT_LIMIT = "scheduler.max_running_requests + scheduler.max_queued_requests"


def prompt_rids(rid: str, request: GenerateRequest) -> list[str]:
    """The id each prompt's request runs under: ``rid`` itself unless the request is a batch."""
    if not request.is_batch:
        return [rid]
    return [f"{rid}#{index}" for index in range(request.num_prompts)]


def batch_limit(max_prompts_per_request: int, max_requests_in_flight: int) -> int:
    """Most completions (prompts × n) a batch may have. Past what the server holds
    at once a batch could never be admitted: a 503's "retry later" would be a lie."""
    return min(max_prompts_per_request, max_requests_in_flight)


def check_batch_size(request: GenerateRequest, max_prompts_per_request: int, max_requests_in_flight: int) -> None:
    """Refuse a batch with more completions than :func:`batch_limit`, a 400. A
    single prompt's n is bounded by the sampling parameters' own range."""
    if not request.is_batch:
        return
    limit = batch_limit(max_prompts_per_request, max_requests_in_flight)
    if request.num_completions <= limit:
        return
    setting = "server.max_prompts_per_request" if limit == max_prompts_per_request else IN_FLIGHT_LIMIT
    n = request.sampling_params.n
    asked = f"{request.num_prompts} prompts"
    if n > 1:
        asked += f" × n={n} = {request.num_completions} completions"
    raise RequestError(
        f"{request.prompt_field} holds {asked}, over this server's limit of {limit} completions per request "
        f"({setting}); split it into smaller requests",
        request.prompt_field,
    )


def for_prompt(error: RequestError, request: GenerateRequest, index: int) -> RequestError:
    """``error``, raised for one prompt of a batch, renamed after that prompt."""
    if not request.is_batch:
        return error
    name = f"{request.prompt_field}[{index}]"
    return RequestError(f"{name}: {error.message}", name, error.status_code)


def tokenize_prompts(request: GenerateRequest, tokenize: Callable[[GenerateRequest], list[int]]) -> list[list[int]]:
    """Every prompt's tokens, in order; the first prompt ``tokenize`` refuses refuses the request."""
    tokenized = []
    for index, prompt_request in enumerate(request.prompt_requests()):
        try:
            tokenized.append(tokenize(prompt_request))
        except RequestError as error:
            raise for_prompt(error, request, index) from None
    return tokenized


def prompt_messages(
    request: GenerateRequest, rids: list[str], input_ids: list[list[int]]
) -> list[TokenizedGenerateReq]:
    """The scheduler's message for each prompt."""
    return [
        TokenizedGenerateReq(rid, ids, _with_seed(request), request.stream, request.priority, request.tenant,
                             request.lora_name)
        for rid, ids in zip(rids, input_ids)
    ]


def _with_seed(request: GenerateRequest) -> SamplingParams:
    # A seed left to the server is fixed here, so what the scheduler receives
    # fully determines the output; drawn per prompt, so a batch's prompts do
    # not share their random numbers.
    params = request.sampling_params
    if params.seed is not None:
        return params
    return dataclasses.replace(params, seed=secrets.randbits(63))
