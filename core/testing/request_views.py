"""Requests, and the prefix cache, as a scheduling policy receives them, built without a scheduler.

A policy's ``order`` and ``choose_preemption_victim`` get read-only
:class:`~tercet.plugin_api.RequestView`\\ s; :func:`make_request_view` makes one
from the few fields a policy test cares about, so the test exercises the
policy against exactly what the scheduler would hand it. A policy that reads the
prefix cache (``SchedulerView.prefix_cache``) gets one from :func:`cache_holding`.
"""

from __future__ import annotations

from typing import Sequence

from tercet.model.kv_cache import PageAllocator
from tercet.sampling_params import SamplingParams
from tercet.scheduler.policy_views import RequestView
from tercet.scheduler.radix_cache import RadixCache
from tercet.scheduler.req import Req

DEFAULT_PROMPT = (1, 2, 3)
CACHE_PAGE_SIZE = 2
CACHE_PAGES = 64


def make_request_view(
    rid: str,
    arrival_index: int = 0,
    input_ids: Sequence[int] = DEFAULT_PROMPT,
    *,
    output_ids: Sequence[int] = (),
    sampling_params: SamplingParams | None = None,
    max_new_tokens: int | None = None,
    priority: int = 0,
    tenant: str | None = None,
) -> RequestView:
    """A waiting (or, with ``output_ids``, a resumed) request's view.

    ``max_new_tokens`` is a shortcut for ``SamplingParams(max_new_tokens=...)``;
    give one or the other.
    """
    if sampling_params is not None and max_new_tokens is not None:
        raise ValueError("give sampling_params or max_new_tokens, not both")
    if sampling_params is None:
        sampling_params = SamplingParams() if max_new_tokens is None else SamplingParams(max_new_tokens=max_new_tokens)
    # The scheduler's own request stays behind the view, as it does in a real scheduler.
    req = Req(rid, list(input_ids), sampling_params, arrival_index, priority=priority, tenant=tenant,
              output_ids=list(output_ids))
    return RequestView(req)


def cache_holding(*prompts: Sequence[int], page_size: int = CACHE_PAGE_SIZE) -> RadixCache:
    """A prefix cache holding each prompt's whole pages (a prompt's tokens, in pages of ``page_size``)."""
    cache = RadixCache(PageAllocator(CACHE_PAGES), page_size)
    for prompt in prompts:
        cache.insert(prompt, cache.page_allocator.alloc(len(prompt) // page_size))
    return cache
