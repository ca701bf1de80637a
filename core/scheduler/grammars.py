"""Constrained requests on the scheduler side: compiling off the loop, a cache, a matcher per completion.

A request with a constraint waits here, not in the waiting queue, until its
grammar is compiled: compiling a JSON Schema can take tens of milliseconds,
which would stall every running request if it ran on the loop. A worker
thread compiles (llguidance releases the GIL while it works); the loop picks
up what is ready at each step. A constraint the backend cannot compile ends
that request alone with a 400 naming the problem.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
from concurrent.futures import Future, ThreadPoolExecutor

from tercet.scheduler.grammar_backend import GrammarBackend, GrammarError, GrammarTokenizer
from tercet.scheduler.req import Req

logger = logging.getLogger(__name__)


class GrammarCompiler:
    def __init__(self, backend_factory, cache_size: int, plugin_name: str | None = None,
                 wait_for_compiles: bool = False):
        self._backend_factory = backend_factory
        # True: take_ready waits for every pending compile, so what is ready never
        # depends on timing (tensor-parallel ranks must agree on it).
        self.wait_for_compiles = wait_for_compiles
        # Who registered the backend, for the failure counts.
        self.plugin_name = plugin_name
        self._backend: GrammarBackend | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-compile")
        self._cache: collections.OrderedDict[tuple[str, str], Future] = collections.OrderedDict()
        self._cache_size = cache_size
        # Request groups whose grammar is being compiled, with its future.
        self.pending: list[tuple[list[Req], Future]] = []

    @property
    def backend(self) -> GrammarBackend:
        # Built on first use: a server that never sees a constraint never pays for it.
        if self._backend is None:
            self._backend = self._backend_factory()
        return self._backend

    def submit(self, group: list[Req]) -> None:
        key = group[0].sampling_params.constraint
        future = self._cache.get(key)
        if future is None:
            future = self._executor.submit(self._compile, key)
            self._cache[key] = future
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        self.pending.append((group, future))

    def _compile(self, key: tuple[str, str]):
        kind, text = key
        return self.backend.compile(kind, text)

    def take_ready(self) -> list[tuple[list[Req], tuple[int, str] | None]]:
        """Groups whose compile finished: ``(group, None)`` with a matcher on every
        completion, or ``(group, (status, message))``: 400 for a constraint that
        cannot be compiled, 500 for a backend that failed."""
        if self.wait_for_compiles:
            concurrent.futures.wait([future for _, future in self.pending])
        ready, still = [], []
        for group, future in self.pending:
            if not future.done():
                still.append((group, future))
                continue
            ready.append((group, self._attach_matchers(group, future)))
        self.pending = still
        return ready

    def _attach_matchers(self, group: list[Req], future: Future) -> tuple[int, str] | None:
        error = future.exception()
        if error is not None:
            self._forget(future)
            if isinstance(error, GrammarError):
                return 400, str(error)
            logger.error("compiling a grammar failed", exc_info=error)
            return 500, f"the grammar backend failed compiling the constraint ({type(error).__name__})"
        try:
            for req in group:
                req.grammar = self.backend.matcher(future.result())
        except GrammarError as error:
            return 400, str(error)
        except Exception:  # the backend is a plugin: its failure ends this request only
            logger.error("the grammar backend failed making a matcher", exc_info=True)
            return 500, "the grammar backend failed on the constraint"
        return None

    def _forget(self, future: Future) -> None:
        # A failed compile is not cached: the next request gets its own error.
        for key, cached in list(self._cache.items()):
            if cached is future:
                del self._cache[key]

    def drop(self, rids: set[str]) -> list[list[Req]]:
        """Take out the pending groups with a completion among ``rids`` (aborted); they are returned."""
        dropped = [group for group, _ in self.pending if any(req.rid in rids for req in group)]
        self.pending = [(group, future) for group, future in self.pending if group not in dropped]
        return dropped

    def drop_all(self) -> list[list[Req]]:
        dropped = [group for group, _ in self.pending]
        self.pending = []
        return dropped

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def grammar_tokenizer(tokenizer, model_runner) -> GrammarTokenizer:
    """The served vocabulary as a grammar backend needs it."""
    return GrammarTokenizer(
        tokenizer_json=tokenizer.backend_tokenizer.to_str(),
        vocab_size=model_runner.vocab_size,
        eos_token_ids=frozenset(model_runner.eos_token_ids),
    )
