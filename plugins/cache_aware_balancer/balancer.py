"""The ``cache_aware`` balancer: each prompt to the rank that holds most of it, unless the loads are too uneven.

For each prompt it asks every rank's :class:`ApproximateRadixTree` how much of the prompt
that rank holds, then, as SGLang's router does:

1. loads uneven (the busiest rank has more than ``balance_abs_threshold`` completions more
   than the idlest *and* more than ``balance_rel_threshold`` times as many): the
   least-loaded rank;
2. else, when the best rank holds at least ``cache_threshold`` of the prompt: that rank;
3. else (a prefix no rank holds enough of): ``placement`` decides, ``smallest_tree`` (the
   rank thought to hold the fewest tokens, so new prefixes spread) or ``prefix_hash`` (a rank
   chosen by the prompt's first ``hash_prefix_tokens`` tokens).

Every tie is broken in one order of the ranks that the prompt's first tokens fix (a rotation
starting at their hash), never by which worker asks. With several API workers each keeps its
own trees (fed by its own routing, corrected by every rank's eviction reports, which reach all
workers), and ``placement = "auto"`` is ``prefix_hash`` there: a new prefix goes to the same
rank whichever worker sees it first, so the workers' trees agree on it. With one worker,
``auto`` is ``smallest_tree``.
"""

from __future__ import annotations

import zlib
from array import array
from dataclasses import dataclass, fields
from typing import Sequence

from tercet.plugin_api import ConfigError, LoadBalancer

from .approximate_tree import ApproximateRadixTree, as_tokens

OPTIONS_TABLE = "cache_aware"
PLACEMENTS = ("auto", "smallest_tree", "prefix_hash")


@dataclass(frozen=True)
class CacheAwareOptions:
    """``[plugins.cache_aware]``."""

    # The least fraction of a prompt the best rank must hold for the prompt to follow its prefix.
    cache_threshold: float = 0.5
    # Loads are uneven past both: this many completions in flight more, and this many times as many.
    balance_abs_threshold: int = 8
    balance_rel_threshold: float = 1.5
    # Where a prefix no rank holds goes: "smallest_tree", "prefix_hash", or "auto" (prefix_hash with
    # several API workers, smallest_tree with one).
    placement: str = "auto"
    # How many leading tokens name a prefix, for prefix_hash and for the order ties are broken in. Prompts
    # meant to share a rank must share these: a longer count tells more prefixes apart, a shorter one keeps
    # more of them together (and every API worker agreeing where a short shared prefix goes).
    hash_prefix_tokens: int = 64
    # Tokens each rank's tree keeps at most (4 bytes each, plus about 100 bytes a node).
    tree_tokens_per_rank: int = 1 << 20

    @classmethod
    def of(cls, config) -> CacheAwareOptions:
        table = dict(config.plugins.get(OPTIONS_TABLE, {}))
        known = {field.name: field for field in fields(cls)}
        unknown = sorted(set(table) - set(known))
        if unknown:
            raise ConfigError(f"[plugins.{OPTIONS_TABLE}]: unknown option {unknown[0]!r}; the options are: "
                              f"{', '.join(known)}")
        for name, value in table.items():
            table[name] = _checked(name, value, type(known[name].default))
        options = cls(**table)
        if options.placement not in PLACEMENTS:
            raise ConfigError(f"[plugins.{OPTIONS_TABLE}] placement = {options.placement!r}; one of {PLACEMENTS}")
        return options


def _checked(name: str, value, kind: type):
    """``value`` as ``kind`` (a str, or a number at least 0: a whole one for an int), or a ConfigError naming it."""
    if kind is str:
        fits = isinstance(value, str)
    else:
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        fits = is_number and value >= 0 and (kind is float or value == int(value))
    if not fits:
        expected = "a string" if kind is str else f"a{'n' if kind is int else ''} {kind.__name__} at least 0"
        raise ConfigError(f"[plugins.{OPTIONS_TABLE}] {name} = {value!r}: expected {expected}")
    return kind(value)


class CacheAware(LoadBalancer):
    def __init__(self, config, num_ranks: int):
        super().__init__(config, num_ranks)
        self.options = CacheAwareOptions.of(config)
        placement = self.options.placement
        if placement == "auto":
            placement = "prefix_hash" if config.server.api_workers > 1 else "smallest_tree"
        self.placement = placement
        self.trees = [ApproximateRadixTree(self.options.tree_tokens_per_rank) for _ in range(num_ranks)]
        # The last request chosen for, with its tokens as the trees hold them (routed() inserts them).
        self.last_chosen: tuple[object, array] | None = None

    def choose_rank(self, request, loads):
        tokens = as_tokens(request.token_ids)
        self.last_chosen = (request, tokens)
        order = self.rank_order(tokens)
        if self.is_uneven(loads):
            return min(order, key=loads.__getitem__)
        matched = [tree.match(tokens, request.lora_name) for tree in self.trees]
        best = max(matched)
        if best and best >= self.options.cache_threshold * len(tokens):
            return next(rank for rank in order if matched[rank] == best)
        if self.placement == "smallest_tree":
            return min(order, key=lambda rank: self.trees[rank].num_tokens)
        return order[0]

    def is_uneven(self, loads: Sequence[int]) -> bool:
        busiest, idlest = max(loads), min(loads)
        return (busiest - idlest > self.options.balance_abs_threshold
                and busiest > self.options.balance_rel_threshold * idlest)

    def rank_order(self, tokens: array) -> list[int]:
        """The ranks, starting at the one the prompt's first tokens hash to: the same in every API worker."""
        first = zlib.crc32(tokens[:self.options.hash_prefix_tokens].tobytes()) % self.num_ranks
        return [(first + step) % self.num_ranks for step in range(self.num_ranks)]

    def routed(self, request, rank):
        chosen = self.last_chosen
        tokens = chosen[1] if chosen is not None and chosen[0] is request else as_tokens(request.token_ids)
        self.last_chosen = None
        self.trees[rank].insert(tokens, request.lora_name)

    def evicted(self, rank, prefixes):
        tree = self.trees[rank]
        for prefix in prefixes:
            tree.forget(prefix.token_ids, prefix.num_kept_tokens, prefix.lora_name)

