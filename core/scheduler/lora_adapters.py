"""The scheduler's LoRA adapters: which are known, which are loaded, which requests use them.

An adapter is *known* from the moment it is loaded (at start-up, ``[lora]
adapters``, or by ``POST /load_lora_adapter``) until it is unloaded. At most
``[lora] max_loaded`` known adapters hold their weights at once: a request
for one whose weights were dropped reloads them from its directory, and
making room drops the least recently used adapter that no request holds (in
the waiting queue, the batch, or compiling its grammar). An adapter in use is
never dropped nor unloaded: the unload is refused with a 409, to be retried
once its requests are done. Run-time loads and unloads reach every rank
through the control plane, so every rank knows the same adapters.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable

from tercet.errors import RequestError
from tercet.lora.adapter_files import LoraAdapterError

logger = logging.getLogger(__name__)


class AdapterInUse(RequestError):
    """The adapter has requests: it cannot be unloaded now."""

    def __init__(self, message: str):
        super().__init__(message, "lora_name", 409)


class SchedulerAdapters:
    def __init__(self, lora_model, max_loaded: int, names_in_use: Callable[[], Iterable[str | None]]):
        self.lora_model = lora_model
        self.max_loaded = max_loaded
        # Every known adapter's directory, by name.
        self.paths: dict[str, str] = {}
        # The loaded ones, least recently used first.
        self.recency: OrderedDict[str, None] = OrderedDict()
        self.names_in_use = names_in_use
        # Requests received per adapter (for /metrics and /get_server_info).
        self.num_requests: dict[str, int] = {}
        # Called with the name of an adapter just unloaded: the prefix cache drops what it cached under it.
        self.on_unload: Callable[[str], None] = lambda name: None

    @property
    def names(self) -> list[str]:
        return list(self.paths)

    def load(self, name: str, path: str) -> dict:
        """Know and load the adapter; a bad one, or a name already known, changes nothing."""
        if name in self.paths:
            raise LoraAdapterError(f"a LoRA adapter named {name!r} is already loaded; unload it first", "lora_name")
        self._make_room()
        adapter = self.lora_model.load(name, path)
        self.paths[name] = adapter.path
        self.recency[name] = None
        logger.info("LoRA adapter %s loaded from %s (rank %d, %d KiB)", name, path, adapter.rank,
                    adapter.num_bytes >> 10)
        return self.describe(name)

    def unload(self, name: str) -> dict:
        self._check_known(name)
        if name in set(self.names_in_use()):
            raise AdapterInUse(f"LoRA adapter {name!r} is in use by requests; unload it once they are done")
        self.lora_model.unload(name)
        self.recency.pop(name, None)
        del self.paths[name]
        self.on_unload(name)
        logger.info("LoRA adapter %s unloaded", name)
        return {"name": name}

    def use(self, name: str) -> None:
        """A request for ``name`` arrived: make sure its weights are held (404 for an unknown name)."""
        self._check_known(name)
        if name not in self.recency:
            self._make_room()
            self.lora_model.load(name, self.paths[name])
        self.recency.move_to_end(name)
        self.recency[name] = None
        self.num_requests[name] = self.num_requests.get(name, 0) + 1

    def _check_known(self, name: str) -> None:
        if name not in self.paths:
            loaded = ", ".join(self.paths) or "none"
            raise RequestError(f"no LoRA adapter named {name!r} is loaded (loaded: {loaded})", "lora_name", 404)

    def _make_room(self) -> None:
        """Drop the least recently used adapters no request holds until one more fits."""
        if len(self.recency) < self.max_loaded:
            return
        in_use = set(self.names_in_use())
        for name in list(self.recency):
            if len(self.recency) < self.max_loaded:
                return
            if name not in in_use:
                self.lora_model.unload(name)
                del self.recency[name]
                logger.info("LoRA adapter %s dropped from memory (least recently used)", name)
        if len(self.recency) >= self.max_loaded:
            raise RequestError(
                f"all {self.max_loaded} loaded LoRA adapters (lora.max_loaded) are in use; retry later",
                "lora_name", 503,
            )

    def describe(self, name: str) -> dict:
        adapter = self.lora_model.adapters.get(name)
        return {"name": name, "path": self.paths[name], "is_loaded": adapter is not None,
                "rank": None if adapter is None else adapter.rank,
                "bytes": 0 if adapter is None else adapter.num_bytes,
                "num_requests": self.num_requests.get(name, 0)}

    def as_list(self) -> list[dict]:
        return [self.describe(name) for name in self.paths]


def scheduler_adapters_of(context, model_runner, names_in_use: Callable[[], Iterable[str | None]]):
    """The rank's adapters, with those of ``[lora] adapters`` loaded (None: LoRA is off).

    A start-up adapter that cannot be served stops the server, naming it."""
    from tercet.errors import ConfigError

    lora = context.config.lora
    if not lora.is_on:
        return None
    if not model_runner.can_generate:
        raise ConfigError("LoRA adapters need a model that generates; this one only embeds")
    lora_model = model_runner.attach_lora(context.chosen("lora_backends")(), lora.max_rank)
    adapters = SchedulerAdapters(lora_model, lora.max_loaded, names_in_use)
    for name, path in lora.adapter_paths.items():
        try:
            adapters.load(name, path)
        except LoraAdapterError as error:
            raise ConfigError(f"lora.adapters: {error.message}") from None
    return adapters
