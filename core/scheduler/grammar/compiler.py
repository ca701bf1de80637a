"""Constrained requests on the scheduler side: compiling off the loop, a cache, a matcher per completion.

A request with a constraint waits here, not in the waiting queue, until its
grammar is compiled: compiling a JSON Schema can take from milliseconds to
many seconds, which would stall every running request if it ran on the loop.
A pool of threads, one a core, compiles (llguidance releases the GIL while it
works, so the loop steps on meanwhile); the loop picks up what is ready at
each step. A request waits at most ``[grammar] compile_timeout`` for its
grammar: past that, or once it is aborted, its compile is written off
(:mod:`tercet.scheduler.grammar.compile_pool`) and holds nobody else. A constraint the
backend cannot compile, or not in time, ends that request alone with a 400
naming the problem.

Under tensor parallelism every rank compiles for itself, and a request may
enter a batch only on every rank at once: what is settled (compiled, failed or
timed out) is agreed on each step (``agree``,
:func:`tercet.scheduler.tensor_parallel_agreement.agreed_outcomes`), never
waited for.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

from tercet.reasoning.parser import ReasoningFrame
from tercet.scheduler.grammar.closed_objects import closed_objects
from tercet.scheduler.grammar.compile_pool import CompilePool
from tercet.scheduler.grammar.grammar_backend import GrammarBackend, GrammarError, GrammarTokenizer
from tercet.scheduler.req import Req

logger = logging.getLogger(__name__)
# What became of a compile for one request: None (a matcher on every completion), or (status, message).
Outcome = tuple[int, str] | None


@dataclass(frozen=True)
class PendingGrammar:
    """A request group waiting for its constraint's compile."""

    group: list[Req]
    future: Future
    deadline: float  # time.monotonic() past which the group stops waiting

    @property
    def rid(self) -> str:
        return self.group[0].rid


def _alone(outcomes: dict[str, Outcome]) -> dict[str, Outcome]:
    return outcomes


class GrammarCompiler:
    def __init__(self, backend_factory, cache_size: int, plugin_name: str | None = None, *,
                 num_workers: int = 1, compile_timeout: float = 10.0, allow_extra_properties: bool = False,
                 agree: Callable[[dict[str, Outcome]], dict[str, Outcome]] = _alone):
        self._backend_factory = backend_factory
        # Who registered the backend, for the failure counts.
        self.plugin_name = plugin_name
        self.compile_timeout = compile_timeout
        # False: an object schema listing its properties gets no others (tercet.scheduler.grammar.closed_objects).
        self.allow_extra_properties = allow_extra_properties
        # What every tensor-parallel rank has settled (the local outcomes alone on one rank).
        self._agree = agree
        self._backend: GrammarBackend | None = None
        self.pool = CompilePool(num_workers)
        self._cache: collections.OrderedDict[tuple, Future] = collections.OrderedDict()
        self._cache_size = cache_size
        # Every compile started and not known to have ended (the cache may have let go of some).
        self._compiling: list[Future] = []
        self.pending: list[PendingGrammar] = []
        # Groups settled here and not yet on every rank: their outcome, by leader rid.
        self._settled: dict[str, Outcome] = {}

    @property
    def backend(self) -> GrammarBackend:
        # Built on first use: a server that never sees a constraint never pays for it.
        if self._backend is None:
            self._backend = self._backend_factory()
        return self._backend

    def submit(self, group: list[Req]) -> None:
        key = group[0].sampling_params.grammar_key
        future = self._cache.get(key)
        if future is None:
            future = self.pool.submit(lambda: self._compile(key))
            self._compiling.append(future)
            self._cache[key] = future
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        self.pending.append(PendingGrammar(group, future, time.monotonic() + self.compile_timeout))

    def _compile(self, key: tuple[str, str, str | None, str | None]):
        kind, text, reasoning_start, reasoning_end = key
        started = time.monotonic()
        try:
            if kind == "json_schema" and not self.allow_extra_properties:
                text = closed_objects(text)
            if reasoning_end is None:
                return self.backend.compile(kind, text)
            frame = ReasoningFrame(reasoning_start, reasoning_end)
            # A backend written without the base class has no such method: it refuses, as the base does.
            compile_after = getattr(self.backend, "compile_after_reasoning", None)
            if compile_after is None:
                return GrammarBackend.compile_after_reasoning(self.backend, kind, text, frame)
            return compile_after(kind, text, frame)
        finally:
            logger.debug("compiling a %s of %d characters took %.3f s", kind, len(text), time.monotonic() - started)

    def take_ready(self) -> list[tuple[list[Req], Outcome]]:
        """Groups settled on every rank: ``(group, None)`` with a matcher on every
        completion, or ``(group, (status, message))``: 400 for a constraint that
        cannot be compiled or not within ``compile_timeout``, 500 for a backend
        that failed."""
        self._settle_here()
        agreed = self._agree(dict(self._settled))
        ready = [(entry.group, agreed[entry.rid]) for entry in self.pending if entry.rid in agreed]
        self.pending = [entry for entry in self.pending if entry.rid not in agreed]
        for rid in agreed:
            self._settled.pop(rid, None)
        self._write_off_unwanted()
        self.pool.start_queued()
        return ready

    def _settle_here(self) -> None:
        now = time.monotonic()
        for entry in self.pending:
            if entry.rid in self._settled:
                continue
            if entry.future.done():
                self._settled[entry.rid] = self._attach_matchers(entry.group, entry.future)
            elif now >= entry.deadline:
                self._settled[entry.rid] = (400, f"the constraint did not compile within grammar.compile_timeout "
                                                 f"({self.compile_timeout:g} s); simplify it")

    def _attach_matchers(self, group: list[Req], future: Future) -> Outcome:
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

    def _write_off_unwanted(self) -> None:
        """Compiles no unsettled group waits for any more stop holding the pool (and leave the cache)."""
        wanted = {id(entry.future) for entry in self.pending if entry.rid not in self._settled}
        self._compiling = [future for future in self._compiling if not future.done()]
        for future in [future for future in self._compiling if id(future) not in wanted]:
            self._compiling.remove(future)
            self._forget(future)
            self.pool.write_off(future)

    def _forget(self, future: Future) -> None:
        # A failed or abandoned compile is not cached: the next request gets its own.
        for key, cached in list(self._cache.items()):
            if cached is future:
                del self._cache[key]

    def drop(self, rids: set[str]) -> list[list[Req]]:
        """Take out the pending groups with a completion among ``rids`` (aborted); they are returned."""
        dropped = [entry for entry in self.pending if any(req.rid in rids for req in entry.group)]
        return self._take_out(dropped)

    def drop_all(self) -> list[list[Req]]:
        return self._take_out(list(self.pending))

    def _take_out(self, entries: list[PendingGrammar]) -> list[list[Req]]:
        taken = {id(entry) for entry in entries}
        self.pending = [entry for entry in self.pending if id(entry) not in taken]
        for entry in entries:
            self._settled.pop(entry.rid, None)
        self._write_off_unwanted()
        return [entry.group for entry in entries]

    def close(self) -> None:
        self.pool.close()


def grammar_tokenizer(tokenizer, model_runner) -> GrammarTokenizer:
    """The served vocabulary as a grammar backend needs it."""
    return GrammarTokenizer(
        tokenizer_json=tokenizer.backend_tokenizer.to_str(),
        vocab_size=model_runner.vocab_size,
        eos_token_ids=frozenset(model_runner.eos_token_ids),
    )


def num_cores() -> int:
    """The cores this process may run on (a container or taskset may allow fewer than the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
