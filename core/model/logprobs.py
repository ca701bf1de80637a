"""Log-probabilities of chosen and prompt tokens, from the model's raw distribution.

Reported values are ``log_softmax`` of the logits before any sampling
transform (bias, penalties, temperature, truncation): what transformers'
forward gives and what OpenAI-compatible servers return by default.

Token ids, their log-probabilities and the top alternatives travel to the
host as columns of one float64 tensor, so reading them back is a single
device sync; float64 holds every token id and float32 log-probability exactly.
"""

from __future__ import annotations

import torch

from tercet.ipc.messages import TokenLogprobs
from tercet.model.host_copy import read_back


def pack_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, num_top: int) -> torch.Tensor:
    """``[N, 2 + 2 * num_top]`` float64 columns for ``logits [N, V]`` and ``token_ids [N]``:
    the token id, its log-probability, then the ``num_top`` best log-probabilities and
    their token ids, best first."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    columns = [token_ids[:, None].double(), logprobs.gather(1, token_ids[:, None]).double()]
    if num_top > 0:
        top_logprobs, top_token_ids = logprobs.topk(num_top, dim=-1)
        columns += [top_logprobs.double(), top_token_ids.double()]
    return torch.cat(columns, dim=1)


def unpack_logprobs(rows: list[list[float]], top_nums: list[int]) -> tuple[list[int], list[float], list[list[list]]]:
    """Host lists from ``pack_logprobs(...)`` read back; row i keeps ``top_nums[i]`` alternatives."""
    num_top = (len(rows[0]) - 2) // 2 if rows else 0
    token_ids = [int(row[0]) for row in rows]
    logprobs = [row[1] for row in rows]
    tops = [
        [[int(row[2 + num_top + j]), row[2 + j]] for j in range(top_num)] for row, top_num in zip(rows, top_nums)
    ]
    return token_ids, logprobs, tops


def prompt_logprobs(full_logits: torch.Tensor, prompt_ids: list[int], top_n: int) -> TokenLogprobs:
    """Log-probabilities of a whole prompt from the logits ``[L, V]`` of its ``L`` tokens.

    Entry 0 is ``None`` (nothing predicts the first token); entry ``j`` is the
    log-probability of ``prompt_ids[j]`` under row ``j - 1``, with that row's
    ``top_n`` best alternatives."""
    return prompt_logprobs_of_chunk(full_logits, prompt_ids, 0, top_n)


def prompt_logprobs_of_chunk(
    chunk_logits: torch.Tensor, prompt_ids: list[int], chunk_start: int, top_n: int
) -> TokenLogprobs:
    """The part of :func:`prompt_logprobs` one prefill chunk can give.

    ``chunk_logits [L, V]`` are the logits of prompt positions
    ``chunk_start .. chunk_start + L - 1``; they predict positions
    ``chunk_start + 1 .. chunk_start + L`` (the last row predicts the first
    output token once the chunk ends the prompt, and is not used here). The
    first chunk also yields the ``None`` entry of position 0, so the parts of
    consecutive chunks joined with ``TokenLogprobs.concat`` equal the whole."""
    targets = prompt_ids[chunk_start + 1 : chunk_start + 1 + chunk_logits.shape[0]]
    token_ids: list[int] = []
    logprobs: list[float | None] = []
    tops: list[list[list]] = []
    if chunk_start == 0 and prompt_ids:
        token_ids.append(prompt_ids[0])
        logprobs.append(None)
        tops.append([])
    if targets:
        target_ids = torch.tensor(targets, dtype=torch.int64, device=chunk_logits.device)
        rows = read_back(pack_logprobs(chunk_logits[: len(targets)], target_ids, top_n))
        ids, values, alternatives = unpack_logprobs(rows, [top_n] * len(rows))
        token_ids += ids
        logprobs += values
        tops += alternatives
    return TokenLogprobs(token_ids=token_ids, logprobs=logprobs, top=tops)
