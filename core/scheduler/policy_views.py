"""Read-only views that scheduling policies see instead of the scheduler's own objects.

A policy is a plugin: it may look at every request and at the prefix cache,
but the requests' state and the radix tree have one owner, the scheduler.
:class:`RequestView` shows one request's fields with nothing to assign and
sequences as tuples; :class:`PrefixCacheView` answers prefix matches (and
where in the tree a prompt would land) without handing out the tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tercet.sampling_params import SamplingParams


class RequestView:
    """One waiting or running request, read only (the scheduler's ``Req`` behind it)."""

    __slots__ = ("_req", "_input_ids")

    def __init__(self, req):
        self._req = req
        self._input_ids = tuple(req.input_ids)  # a prompt never changes: copied once

    @property
    def rid(self) -> str:
        return self._req.rid

    @property
    def arrival_index(self) -> int:
        """Arrival order at this scheduler: smaller came first."""
        return self._req.arrival_index

    @property
    def priority(self) -> int:
        return self._req.priority

    @property
    def tenant(self) -> str | None:
        return self._req.tenant

    @property
    def sampling_params(self) -> SamplingParams:
        return self._req.sampling_params

    @property
    def input_ids(self) -> tuple[int, ...]:
        return self._input_ids

    @property
    def output_ids(self) -> tuple[int, ...]:
        """Tokens generated so far (a retracted request keeps them)."""
        return tuple(self._req.output_ids)

    @property
    def all_token_ids(self) -> tuple[int, ...]:
        return self._input_ids + self.output_ids

    @property
    def num_tokens(self) -> int:
        return len(self._input_ids) + len(self._req.output_ids)

    @property
    def num_retractions(self) -> int:
        return self._req.num_retractions

    @property
    def num_completions(self) -> int:
        """Completions admitted with this one (n > 1 completions wait and start together)."""
        return len(self._req.group)

    def __repr__(self) -> str:
        return f"RequestView({self.rid!r}, arrival {self.arrival_index})"


@dataclass(frozen=True)
class CachedPrefix:
    """What the prefix cache holds of a prompt."""

    # Leading tokens found (a whole number of pages).
    num_tokens: int
    # Opaque keys of the tree's nodes from the root to the deepest one the prompt reaches:
    # requests whose paths share a key share that much cached prefix.
    path: tuple[int, ...]


class PrefixCacheView:
    """Prefix matches against the scheduler's radix cache, read only."""

    __slots__ = ("_cache",)

    def __init__(self, radix_cache):
        self._cache = radix_cache

    @property
    def page_size(self) -> int:
        return self._cache.page_size

    @property
    def root_key(self) -> int:
        return id(self._cache.root)

    def match(self, token_ids: Sequence[int]) -> CachedPrefix:
        """The cached prefix of ``token_ids`` and where in the tree it ends.

        The path ends at the last node fully matched or, when the prefix goes
        on into part of a child, at that child: requests sharing part of one
        edge share more than its parent.
        """
        cache = self._cache
        token_ids = list(token_ids)
        match = cache.match_prefix(token_ids)
        nodes = []
        node = match.node
        while node is not None:
            nodes.append(node)
            node = node.parent
        nodes.reverse()
        depth = sum(len(node.token_ids) for node in nodes)
        if match.num_tokens > depth:
            nodes.append(nodes[-1].children[tuple(token_ids[depth:depth + cache.page_size])])
        return CachedPrefix(match.num_tokens, tuple(id(node) for node in nodes))
