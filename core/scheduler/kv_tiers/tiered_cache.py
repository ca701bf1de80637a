"""The radix cache with a tier below the pool: what it evicts goes down, what a request needs comes back.

:func:`kv_tiers_of` builds it where ``[cache] storage`` names a tier. It hooks
the radix cache's eviction (each evicted node's pages go to :class:`Demotion`),
answers admission's question of whether a waiting request is ready
(:class:`Promotion`), and gives saved sessions the prefix's pages. It holds the
tier's figures for ``/metrics``.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from tercet.errors import ConfigError, RequestError
from tercet.formats.default_model import default_cache_dir
from tercet.scheduler.kv_tiers.contained_storage import ContainedStorage
from tercet.scheduler.kv_tiers.demotion import Demotion
from tercet.scheduler.kv_tiers.page_codec import PageCheckError, decode_page, dtype_name
from tercet.scheduler.kv_tiers.page_keys import PageKeys, checkpoint_fingerprint
from tercet.scheduler.kv_tiers.pool_pages import PoolPages
from tercet.scheduler.kv_tiers.promotion import Promotion
from tercet.scheduler.kv_tiers.saved_sessions import SavedSessions
from tercet.scheduler.kv_tiers.tier_stats import TierStats

logger = logging.getLogger(__name__)
# The most evicted K/V held in memory waiting for the writer thread; past it, evictions are not kept.
MAX_PENDING_WRITE_BYTES = 256 * 2**20


def model_identity(model_runner) -> dict:
    """What makes one server's pages unusable by another: the weights, their numerics and the KV layout."""
    cache = model_runner.kv_cache
    return {
        "model_path": str(Path(model_runner.model_path).resolve()),
        "checkpoint": checkpoint_fingerprint(model_runner.model_path),
        "quantization": model_runner.quantization,
        "weight_format": model_runner.load_report.weight_format,
        "kv_dtype": dtype_name(cache.dtype),
        "kv_shape": [cache.num_layers, cache.num_kv_heads, cache.head_dim],
        "page_size": cache.page_size,
        "tp": [model_runner.tp.rank, model_runner.tp.size],
    }


class KVTiers:
    def __init__(self, storage: ContainedStorage, radix_cache, model_runner, tier: str,
                 sessions_directory: Path | None):
        self.storage = storage
        self.radix_cache = radix_cache
        self.model_runner = model_runner
        self.pool_pages = PoolPages(model_runner.kv_cache)
        self.page_keys = PageKeys(model_identity(model_runner), self.pool_pages.page_size)
        self.stats = TierStats(tier)
        self.demotion = Demotion(storage, self.pool_pages, self.page_keys, self.stats, MAX_PENDING_WRITE_BYTES)
        self.promotion = Promotion(storage, self.pool_pages, self.page_keys, self.stats, radix_cache)
        self.sessions = SavedSessions(sessions_directory, self) if sessions_directory is not None else None
        radix_cache.on_demote = self.on_demote

    def on_demote(self, node) -> None:
        """The radix cache evicts ``node``: its pages go down (a failure loses them, never the eviction)."""
        self.stats.add(evictions=len(node.pages))
        try:
            namespace, token_ids = self.radix_cache.chain_of(node)
            self.demotion.demote(namespace, token_ids, node.pages)
        except Exception:
            self.storage.failures.record("kv_storage", "writing evicted KV pages down to the tier failed")

    @contextlib.contextmanager
    def without_demotion(self):
        """Evict without writing down (a flush, or K/V of weights no longer served)."""
        self.demotion.enabled = False
        try:
            yield
        finally:
            self.demotion.enabled = True

    def weights_changed(self) -> None:
        """New weights serve: pages keyed by the old ones are never asked for again."""
        self.page_keys = PageKeys(model_identity(self.model_runner), self.pool_pages.page_size)
        self.demotion.page_keys = self.promotion.page_keys = self.page_keys

    def write_down_before_exit(self) -> None:
        """Every cached page no request holds, down to a persistent tier, written before returning: a
        server restarted on the same file tier finds the prefixes this one held."""
        if not self.storage.persistent:
            return
        self.demotion.max_pending_bytes = float("inf")  # the process ends: no later eviction to make room for
        freed = self.radix_cache.evict(self.radix_cache.num_cached_pages)
        self.demotion.wait()
        logger.info("wrote %d cached KV pages down to the %s tier before exiting", freed, self.stats.tier)

    def prefix_values(self, token_ids: list[int], namespace: str | None) -> list:
        """The K/V of the whole pages of ``token_ids`` held in the pool and then the tier, up to the first gap."""
        match = self.radix_cache.match_and_lock(token_ids, namespace)
        try:
            values = self.pool_pages.split(self.pool_pages.copy_out(match.pages)) if match.pages else []
        finally:
            self.radix_cache.unlock(match.node)
        self.demotion.wait()
        for key in self.page_keys.keys(token_ids, namespace)[len(values):]:
            data = self.storage.get(key)
            try:
                values.append(decode_page(data, key, self.pool_pages.page_shape, self.pool_pages.dtype))
            except PageCheckError:
                break
        return values

    def saved_sessions(self) -> SavedSessions:
        if self.sessions is None:
            raise RequestError('saved sessions need the file tier: start the server with [cache] storage = "file"',
                               "name", 400)
        return self.sessions

    def close(self) -> None:
        self.promotion.close()
        self.demotion.close()
        self.storage.close()


def kv_tiers_of(context, model_runner, radix_cache, failures) -> KVTiers | None:
    """The tier ``[cache] storage`` chooses under ``radix_cache``; None with ``"none"`` or no prefix cache."""
    cache = context.config.cache
    if cache.storage != "none" and not cache.prefix_cache:
        raise ConfigError(f"cache.storage = {cache.storage!r} keeps the prefix cache's evicted pages: it needs "
                          "cache.prefix_cache = true")
    if cache.storage == "none" or radix_cache is None:  # an encoder has no prefix cache to put a tier under
        return None
    if model_runner.tp.enabled:
        raise ConfigError("[cache] storage is not supported with tensor parallelism (parallel.tp_size > 1): "
                          'set cache.storage = "none"')
    storage = ContainedStorage(context.chosen("kv_storages")(context.config),
                               context.chosen_plugin_name("kv_storages"), failures)
    sessions = Path(file_tier_directory(cache)) / "sessions" if cache.storage == "file" else None
    logger.info("KV storage %r below the pool%s", cache.storage, f", sessions in {sessions}" if sessions else "")
    return KVTiers(storage, radix_cache, model_runner, cache.storage, sessions)


def file_tier_directory(cache) -> str:
    """``[cache] file_dir``, or ``<tercet cache dir>/kv_pages`` when it is empty."""
    if cache.file_dir:
        return cache.file_dir
    return str(Path(default_cache_dir()) / "kv_pages")


def saved_sessions_of(kv_memory) -> SavedSessions:
    """The rank's saved sessions; a 400 saying what to configure when there is no file tier."""
    tiers = kv_memory.kv_tiers
    if tiers is None:
        raise RequestError('saved sessions need the file tier: start the server with [cache] storage = "file"',
                           "name", 400)
    return tiers.saved_sessions()


def demotion_paused(kv_memory):
    """A context in which evicted pages are dropped, not written down (a flush, a change of weights)."""
    tiers = kv_memory.kv_tiers
    return contextlib.nullcontext() if tiers is None else tiers.without_demotion()
