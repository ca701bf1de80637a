"""Greedy decoding over the paged cache with a bare ModelRunner: what a scheduler does, reduced to the bone (tests and benchmarks)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tercet.model.model_runner import ModelRunner
from tercet.model.sampler import SamplingBatch, sample
from tercet.sampling_params import SamplingParams


@dataclass
class Sequence:
    row: int
    token_ids: list[int]
    num_cached: int = 0
    pages: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    # The LoRA adapter the sequence runs with (None: the base model).
    adapter: str | None = None


class PagedGreedyDriver:
    """What a scheduler does, reduced to the bone: pages in, one forward per step, tokens out."""

    def __init__(self, runner: ModelRunner):
        self.runner = runner

    def start(self, prompt_ids: list[int], adapter: str | None = None) -> Sequence:
        return Sequence(row=self.runner.req_to_token_pool.alloc(), token_ids=list(prompt_ids), adapter=adapter)

    def step(self, chunks: dict[int, int] | None = None, *sequences: Sequence) -> None:
        """One forward over ``sequences``; ``chunks`` caps how many uncached tokens one may feed."""
        chunks = chunks or {}
        new_token_ids = []
        for i, sequence in enumerate(sequences):
            end = len(sequence.token_ids)
            if i in chunks:
                end = min(end, sequence.num_cached + chunks[i])
            self.reserve(sequence, end)
            new_token_ids.append(sequence.token_ids[sequence.num_cached : end])
        batch = self.runner.build_batch(
            [s.row for s in sequences], [s.num_cached for s in sequences], new_token_ids,
            adapters=[s.adapter for s in sequences],
        )
        logits = self.runner.forward(batch)
        num = len(sequences)
        greedy = SamplingBatch.from_params([SamplingParams(temperature=0)] * num, [0] * num, [0] * num, device="cpu")
        next_tokens = sample(logits, greedy).token_ids
        for sequence, new, token in zip(sequences, new_token_ids, next_tokens):
            sequence.num_cached += len(new)
            if sequence.num_cached == len(sequence.token_ids):  # a partial chunk samples nothing
                sequence.token_ids.append(token)
                sequence.output_ids.append(token)

    def reserve(self, sequence: Sequence, num_tokens: int) -> None:
        page_size = self.runner.page_size
        needed = -(-num_tokens // page_size) - len(sequence.pages)
        if needed > 0:
            pages = self.runner.page_allocator.alloc(needed)
            assert pages is not None, "test pool too small"
            self.runner.req_to_token_pool.assign_pages(sequence.row, len(sequence.pages), pages, page_size)
            sequence.pages += pages


def greedy_tokens(runner: ModelRunner, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """Each prompt's greedy continuation, the prompts run together as one batch."""
    driver = PagedGreedyDriver(runner)
    sequences = [driver.start(prompt) for prompt in prompts]
    for _ in range(max_new_tokens):
        driver.step(None, *sequences)
    return [sequence.output_ids for sequence in sequences]
