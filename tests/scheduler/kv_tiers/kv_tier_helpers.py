"""What the tiered-cache tests share: two prompts that cannot share the tiny pool, and running them."""

from __future__ import annotations

from tercet.sampling_params import SamplingParams

PAGE = 8
CONVERSATION = [(7 * index) % 900 + 50 for index in range(6 * PAGE + 3)]  # 6 whole pages and 3 tokens
OTHER = [(11 * index) % 900 + 40 for index in range(12 * PAGE)]  # enough to push the first out of the pool


def greedy(max_new_tokens: int = 6) -> SamplingParams:
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, seed=1, ignore_eos=True)


def tiered_harnesses(tercet_scheduler, tmp_path):
    """``make(storage, *settings, directory=None)``: a scheduler whose 16-page pool cannot hold both
    prompts at once, recording each request's cached tokens."""
    def make(storage: str, *settings: str, directory=None):
        harness = tercet_scheduler(settings=[f"cache.storage={storage}", f"cache.file_dir={directory or tmp_path}",
                                             *settings], max_total_tokens=16 * PAGE, page_size=PAGE)
        return harness

    return make


def run(harness, rid: str, prompt: list[int]) -> list[int]:
    harness.submit(rid, prompt, greedy())
    return harness.run_until_finished()[rid]


def push_out_and_return(harness) -> tuple[list[int], list[int]]:
    """The conversation's tokens first, and again after another prompt filled the pool."""
    first = run(harness, "first", CONVERSATION)
    run(harness, "other", OTHER)
    tiers = harness.scheduler.kv_memory.kv_tiers
    if tiers is not None:
        tiers.demotion.wait()
    return first, run(harness, "again", CONVERSATION)
