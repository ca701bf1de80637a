"""Turning a step's results into one BatchTokenIDOutput for the detokenizer."""

from __future__ import annotations

from tercet.messages import BatchTokenIDOutput, DetokenizeParams, TokenLogprobs
from tercet.scheduler.req import Req


def take_unsent_output(reqs: list[Req]) -> BatchTokenIDOutput:
    """Everything each request produced since its previous output, marking it sent."""
    columns: dict[str, list] = {name: [] for name in (
        "rids", "new_token_ids", "finished_reasons", "prompt_tokens", "completion_tokens",
        "detokenize_params", "output_logprobs", "prompt_logprobs", "cached_tokens",
    )}
    for req in reqs:
        params = req.sampling_params
        new_token_ids = req.output_ids[req.num_sent_tokens:]
        columns["rids"].append(req.rid)
        columns["new_token_ids"].append(new_token_ids)
        columns["finished_reasons"].append(req.finish_reason)
        columns["prompt_tokens"].append(len(req.input_ids))
        columns["completion_tokens"].append(len(req.output_ids))
        columns["detokenize_params"].append(
            None if req.has_sent_output
            else DetokenizeParams(params.skip_special_tokens, list(params.stop), params.no_stop_trim)
        )
        columns["output_logprobs"].append(
            TokenLogprobs(new_token_ids, req.unsent_logprobs, req.unsent_top_logprobs) if params.return_logprob else None
        )
        columns["prompt_logprobs"].append(None if req.has_sent_output else req.prompt_logprobs)
        columns["cached_tokens"].append(req.num_prefix_cache_hits or 0)
        req.num_sent_tokens = len(req.output_ids)
        req.has_sent_output = True
        req.unsent_logprobs, req.unsent_top_logprobs = [], []
    return BatchTokenIDOutput(**columns)
