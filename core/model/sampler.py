"""Batched next-token sampling for every sampling parameter, reproducible per request.

One step: the logits of the whole batch are edited (bias, penalties, min-tokens
suppression; see ``logits_processing``), greedy rows take the argmax, the other
rows are divided by their temperature, truncated (top-k, top-p, min-p; see
``truncation``) and drawn from with a uniform that is a pure function of the
request's (seed, step) (see ``seeded_draw``), so a request's tokens never
depend on which other requests share the batch. Every stage works on tensors
for the whole batch, and a stage no request uses is skipped, so a plain
greedy batch pays for one argmax. Log-probabilities (see ``logprobs``) are
those of the raw logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tercet.model.host_copy import read_back
from tercet.model.logits_processing import LogitEdits
from tercet.model.logprobs import pack_logprobs, unpack_logprobs
from tercet.model.row_argmax import row_argmax
from tercet.model.seeded_draw import SeededDraw, draws_for, uniform_from_seed
from tercet.sampling_params import SamplingParams

__all__ = ["SampleOutput", "SamplingBatch", "sample", "uniform_from_seed"]


@dataclass(frozen=True)
class SampleOutput:
    token_ids: list[int]
    # Raw-distribution log-probability of each chosen token; None when no request asked.
    logprobs: list[float] | None
    # Per request, its top_logprobs_num best [token_id, logprob] pairs, best
    # first (an empty list for requests that asked for none); None when no
    # request asked for log-probabilities.
    top_logprobs: list[list[list]] | None


@dataclass(frozen=True)
class SamplingBatch:
    logit_edits: LogitEdits
    draws: list[SeededDraw]  # the non-greedy rows, by how they are drawn; empty when all are greedy
    # Per request, how many alternatives it wants; None when no request asked for log-probabilities.
    top_logprobs_nums: list[int] | None

    @classmethod
    def from_params(
        cls,
        params: list[SamplingParams],
        seeds: list[int],
        steps: list[int],
        prompt_ids: list[list[int]] | None = None,
        output_ids: list[list[int]] | None = None,
        stop_token_ids_for_min_tokens: list[set[int]] | None = None,
        device: torch.device | str = "cpu",
    ) -> SamplingBatch:
        """Tensors for one step of ``params``; ``steps[i]`` tokens were already generated for request i.

        The histories may be left out while no request uses a penalty or
        min_new_tokens; asking for one without them is an error."""
        if not (len(params) == len(seeds) == len(steps)):
            raise ValueError("params, seeds and steps must have one entry per request")
        top_logprobs_nums = None
        if any(p.return_logprob for p in params):
            top_logprobs_nums = [p.top_logprobs_num if p.return_logprob else 0 for p in params]
        return cls(
            logit_edits=LogitEdits.from_requests(
                params, steps, prompt_ids, output_ids, stop_token_ids_for_min_tokens, device
            ),
            draws=draws_for(params, seeds, steps, device),
            top_logprobs_nums=top_logprobs_nums,
        )


def sample(logits: torch.Tensor, sampling_batch: SamplingBatch) -> SampleOutput:
    """The next token of every row of ``logits [B, V]`` (float32), read back in one host sync."""
    processed = sampling_batch.logit_edits.apply(logits)
    token_ids = _choose_tokens(processed, sampling_batch.draws)
    if sampling_batch.top_logprobs_nums is None:
        return SampleOutput(token_ids=read_back(token_ids), logprobs=None, top_logprobs=None)
    top_nums = sampling_batch.top_logprobs_nums
    rows = read_back(pack_logprobs(logits, token_ids, max(top_nums)))
    ids, logprobs, tops = unpack_logprobs(rows, top_nums)
    return SampleOutput(token_ids=ids, logprobs=logprobs, top_logprobs=tops)


def _choose_tokens(processed: torch.Tensor, draws: list[SeededDraw]) -> torch.Tensor:
    if len(draws) == 1 and draws[0].rows is None:
        return draws[0].tokens_from(processed)
    # Greedy rows keep the argmax; each draw overwrites its own rows.
    token_ids = row_argmax(processed)
    for draw in draws:
        token_ids.index_copy_(0, draw.rows, draw.tokens_from(processed))
    return token_ids
