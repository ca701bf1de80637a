"""Drafting with a model: a second, cheaper model runner beside the served one.

What a proposer plugin's :class:`tercet.scheduler.speculative.proposer.DraftModel` names is
loaded here, over the paged KV cache like the served model but with a small
pool of its own (:mod:`tercet.scheduler.speculative.draft_kv`). Each step it drafts for
the requests that speculate, all together: one forward catches each request
up with the tokens it has not run yet (its prompt the first time; then the
tokens the target emitted since, which overwrite the K/V of rejected drafts),
and its greedy choice is the first draft; then one decode forward per further
draft, fed the draft before it. Greedy drafts are drafts with certainty, the
case the scheduler's rejection sampling expects
(:mod:`tercet.scheduler.speculative.draft_verification`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import torch

from tercet.errors import ConfigError
from tercet.scheduler.speculative.draft_kv import DraftKVSlots, DraftSlot
from tercet.scheduler.speculative.proposer import DraftModel, DraftRequest, Proposer


def common_prefix_length(first: tuple[int, ...], second: tuple[int, ...]) -> int:
    """How many leading tokens the two share (slices compared in C: they differ near their end, if at all)."""
    shared = min(len(first), len(second))
    if first[:shared] == second[:shared]:
        return shared
    equal, different = 0, shared
    while different - equal > 1:
        middle = (equal + different) // 2
        if first[:middle] == second[:middle]:
            equal = middle
        else:
            different = middle
    return equal


class ModelDrafter(Proposer):
    def __init__(self, runner):
        self.runner = runner
        self.slots = DraftKVSlots(runner)

    def propose(self, requests: Sequence[DraftRequest]) -> list[list[int]]:
        drafts: list[list[int]] = [[] for _ in requests]
        # (index in requests, its slot, what it feeds next, how many drafts it wants)
        active = self._catch_up_feeds(requests)
        while active:
            batch = self.runner.build_batch(
                [slot.row for _, slot, _, _ in active], [len(slot.token_ids) for _, slot, _, _ in active],
                [feed for _, _, feed, _ in active],
            )
            with torch.inference_mode():
                choices = self.runner.forward(batch).argmax(dim=-1).tolist()
            still = []
            for (index, slot, feed, wanted), token in zip(active, choices):
                slot.token_ids += tuple(feed)
                drafts[index].append(token)
                if len(drafts[index]) < wanted:
                    still.append((index, slot, [token], wanted))
            active = still
        return drafts

    def _catch_up_feeds(self, requests: Sequence[DraftRequest]) -> list[tuple[int, DraftSlot, list[int], int]]:
        """Each request's slot cut back to what it shares with the request's tokens, and the rest to feed
        (at least its last token, whose logits give the first draft); requests that find no room are left out."""
        keep = {req.rid for req in requests}
        active = []
        for index, req in enumerate(requests):
            tokens = req.token_ids
            # Every draft but the last is fed too.
            slot = self.slots.slot_for(req.rid, len(tokens) + req.max_drafts - 1, keep)
            if slot is None:
                continue
            start = min(common_prefix_length(slot.token_ids, tokens), len(tokens) - 1)
            slot.token_ids = tokens[:start]
            active.append((index, slot, list(tokens[start:]), req.max_drafts))
        return active

    def forget(self, rid: str) -> None:
        self.slots.forget(rid)


def load_model_drafter(spec: DraftModel, context, target) -> ModelDrafter:
    """The drafter ``spec`` names, loaded as the scheduler's config says (its device, attention
    backend and page size), checked against the served model ``target``'s runner."""
    from tercet.model.chosen_components import model_components
    from tercet.model.model_runner import ModelRunner

    config = context.config
    model = dataclasses.replace(
        config.model, path=str(Path(spec.path).expanduser()), quantization=spec.quantization, dtype="auto",
        pooling="none", deterministic=False, cuda_graph_max_batch=0,
    )
    cache = dataclasses.replace(config.cache, max_total_tokens=config.speculative.draft_max_total_tokens)
    try:
        runner = ModelRunner(model, cache, model_components(context),
                             max_running_requests=config.scheduler.max_running_requests)
    except ConfigError as error:
        raise ConfigError(f"speculative.proposer = {spec.proposer!r}: the draft model {model.path} "
                          f"({spec.config_key}) does not load: {error}") from None
    check_draft_fits_target(spec, runner, target)
    return ModelDrafter(runner)


def check_draft_fits_target(spec: DraftModel, runner, target) -> None:
    """A ConfigError naming both models when the draft cannot draft for the target."""
    if runner.vocab_size != target.vocab_size:
        raise ConfigError(
            f"speculative.proposer = {spec.proposer!r}: the draft model {runner.model_path} ({spec.config_key}) has "
            f"a vocabulary of {runner.vocab_size} tokens and the served model {target.model_path} one of "
            f"{target.vocab_size}: a draft model must share the served model's tokenizer"
        )
    target_methods = set(target.load_report.layers_by_method) - {"dense"}
    if spec.requires_dense_target and target_methods:
        raise ConfigError(
            f"speculative.proposer = {spec.proposer!r} drafts with the served model's own weights quantized, for "
            f"a model served with dense linear layers; {target.model_path} is served as "
            f"{target.load_report.weight_format}: set model.quantization = \"none\""
        )
