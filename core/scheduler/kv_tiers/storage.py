"""A KV storage tier: pages of K/V kept below the pool, by key, as bytes.

A tier is a plugin of the "KV storage" kind (``[cache] storage`` chooses it;
``tercet plugin new kv-storage NAME`` starts one). It stores opaque bytes: each
page's data carries its own header and checksum (:mod:`.page_codec`), checked
by the scheduler before the page is used, so a tier may lose pages or hand
back garbled ones without harm; it must never block for long, since the
scheduler calls ``contains`` between steps (``get`` and ``put`` run in
background threads, sometimes two at once: a tier must be thread-safe).
"""

from __future__ import annotations


class KVStorage:
    """Subclass and implement ``get``, ``put`` and ``contains``; ``discard`` and ``close`` are optional."""

    # True where what is put survives a restart of the server (the file tier).
    persistent: bool = False

    def get(self, key: str) -> bytes | None:
        """The bytes last put under ``key``; None when the tier does not hold them (any more)."""
        raise NotImplementedError

    def put(self, key: str, data: bytes) -> None:
        """Keep ``data`` under ``key`` (replacing what was there), evicting other keys to keep a budget."""
        raise NotImplementedError

    def contains(self, key: str) -> bool:
        """Whether ``get(key)`` would likely answer bytes: a cheap check, called between steps."""
        raise NotImplementedError

    def discard(self, key: str) -> None:
        """Forget ``key``: its bytes failed their check. By default nothing (the page stays a miss)."""

    def close(self) -> None:
        """Release what the tier holds open (at shutdown)."""
