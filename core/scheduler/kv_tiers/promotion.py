"""Reading back, in the background, the pages of a waiting request's prefix that are below the pool.

Admission asks :meth:`Promotion.ready` of each waiting request before it
admits it. The first time, the request's pages past what the pool holds are
looked up in the tier (``contains``, by key, stopping at the first miss); if
some are there, a reader thread reads and checks them while the scheduler goes
on stepping other requests, and the request is not ready. Once read, the pages
are put into the pool and the radix tree (:mod:`.page_install`) and the
request is ready: its admission then finds them as any cached prefix, and
prefills only the rest. A page that fails its check ends the read there (it is
discarded from the tier with a log line); the rest of the prompt is computed.
"""

from __future__ import annotations

import logging
import time
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from tercet.scheduler.kv_tiers.page_codec import PageCheckError, decode_page
from tercet.scheduler.kv_tiers.page_install import install_pages

logger = logging.getLogger(__name__)
READ_THREADS = 2
# Requests remembered as looked up; past it, those not reading are forgotten (looked up again if still waiting).
MAX_REMEMBERED = 4096


@dataclass
class PendingRead:
    token_ids: list[int]
    namespace: str | None
    first_page: int
    future: Future


class Promotion:
    def __init__(self, storage, pool_pages, page_keys, stats, radix_cache):
        self.storage = storage
        self.pool_pages = pool_pages
        self.page_keys = page_keys
        self.stats = stats
        self.radix_cache = radix_cache
        self.reader = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="kv-promotion")
        # rid -> its read in flight, or None once the request is ready (looked up, or read and installed).
        self.reads: dict[str, PendingRead | None] = {}

    @property
    def is_reading(self) -> bool:
        return any(read is not None for read in self.reads.values())

    def ready(self, req) -> bool:
        """Whether ``req`` may be admitted now (False while its prefix is being read back)."""
        if req.rid not in self.reads:
            if len(self.reads) >= MAX_REMEMBERED:  # requests aborted while waiting are never admitted
                self.reads = {rid: read for rid, read in self.reads.items() if read is not None}
            self.reads[req.rid] = self._start_read(req)
        read = self.reads[req.rid]
        if read is None:
            return True
        if not read.future.done():
            return False
        self.reads[req.rid] = None
        page_values, seconds = read.future.result()
        self.stats.observe_read_back(seconds)
        if page_values:
            install_pages(self.radix_cache, self.pool_pages, read.token_ids, read.namespace, read.first_page,
                          page_values)
        return True

    def forget(self, rid: str) -> None:
        """The request was admitted: a later look (it may be retracted and wait again) starts afresh."""
        self.reads.pop(rid, None)

    def _start_read(self, req) -> PendingRead | None:
        if req.sampling_params.return_prompt_logprob:  # every prompt token is computed for its logprob
            return None
        token_ids = req.all_token_ids[:-1]
        first_page = self.radix_cache.match_prefix(token_ids, req.lora_name).num_tokens // self.page_keys.page_size
        keys = self.page_keys.keys(token_ids, req.lora_name)[first_page:]
        if not keys:
            return None
        found = []
        for key in keys:
            if not self.storage.contains(key):
                break
            found.append(key)
        self.stats.add(lookups=1, hits=1 if found else 0)
        if not found:
            return None
        return PendingRead(token_ids, req.lora_name, first_page, self.reader.submit(self.read_pages, found))

    def read_pages(self, keys: list[str]) -> tuple[list, float]:
        """The checked values of ``keys``' pages, up to the first missing or failing one; seconds taken."""
        started = time.monotonic()
        page_values = []
        for key in keys:
            data = self.storage.get(key)
            if data is None:
                break
            try:
                page_values.append(decode_page(data, key, self.pool_pages.page_shape, self.pool_pages.dtype))
            except PageCheckError as error:
                logger.warning("dropped KV page %s read back from the tier: %s", key[:16], error)
                self.storage.discard(key)
                self.stats.add(pages_corrupt=1)
                break
            self.stats.add(pages_read=1, bytes_read=len(data))
        return page_values, time.monotonic() - started

    def wait(self) -> None:
        """Return once every read in flight is done (tests step the loop; the real one polls)."""
        futures.wait([read.future for read in self.reads.values() if read is not None])

    def close(self) -> None:
        self.reader.shutdown(wait=False, cancel_futures=True)
