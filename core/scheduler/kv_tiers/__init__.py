"""The prefix cache's tiers below the KV pool: pages it evicts go down, and come back when asked for.

- :mod:`.storage`: what a tier is (a "KV storage" plugin: ``get``/``put``/``contains`` by key),
  and :mod:`.contained_storage`, its calls with their failures contained;
- :mod:`.page_keys`: a page's key, the hash of its token chain and of what makes pages incompatible;
- :mod:`.page_codec`: a page's bytes, with a checksum verified before the page is used;
- :mod:`.pool_pages`: copying pages' K/V out of the pool and into it, and :mod:`.page_install`,
  pages read back put into the pool and the radix tree;
- :mod:`.demotion` and :mod:`.promotion`: the writes down and the reads back, each in a thread;
- :mod:`.tiered_cache`: the two joined to the radix cache and the scheduler's admission, with
  :mod:`.tier_stats`, the figures ``/metrics`` shows;
- :mod:`.saved_sessions`: a conversation's prefix saved to a file under a name (:mod:`.session_names`), and restored.

It imports no other scheduler module: the radix cache, the pool and the requests are handed to
it (duck-typed); ``assembly`` builds it, ``admission`` and ``control`` call it.
"""
