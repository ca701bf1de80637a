"""The factory an attention backend registers: its checks before it is built, said the same way.

Every backend is registered on every machine, so ``tercet plugins`` lists one
that cannot run here, with the reason (``unavailable_reason``); choosing it
anyway fails at start-up with that reason, as does asking it for
``model.deterministic`` when it cannot promise it, or for a quantized KV cache
(``cache.kv_dtype``) it does not say it reads. Only then is ``build``
called: it alone imports torch and the kernels' library, so a plugin's
module stays cheap to import in every process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from tercet.errors import ConfigError

if TYPE_CHECKING:
    from tercet.model.attention import AttentionBackend, AttentionLayout


def always_available() -> None:
    return None


def fits_any_layout(layout: "AttentionLayout") -> None:
    return None


@dataclass(frozen=True)
class AttentionBackendFactory:
    """``factory(layout)`` for ``register_attention_backends``."""

    name: str
    build: Callable[["AttentionLayout"], "AttentionBackend"]
    # Why the backend cannot run in this environment (an extra missing, no GPU), or None.
    environment_problem: Callable[[], str | None] = always_available
    # Why it cannot run for this model (its device, its dtype), or None; asked after the environment.
    layout_problem: Callable[["AttentionLayout"], str | None] = fits_any_layout
    # Why it cannot promise model.deterministic; None when it can.
    deterministic_refusal: str | None = None
    # True: it reads a quantized KV cache (cache.kv_dtype int8 or fp8_e4m3: values and their scales) in
    # place. A backend that does not say so is refused one rather than reading its bytes as floats.
    reads_quantized_cache: bool = False

    def unavailable_reason(self) -> str | None:
        """What ``tercet plugins`` shows: None when the backend can run here."""
        return self.environment_problem()

    def __call__(self, layout: "AttentionLayout") -> "AttentionBackend":
        problem = self.environment_problem() or self.layout_problem(layout)
        if problem is not None:
            raise ConfigError(f"attention.backend {self.name} is unavailable: {problem}")
        if layout.deterministic and self.deterministic_refusal is not None:
            raise ConfigError(
                f"attention.backend {self.name} cannot serve model.deterministic = true: {self.deterministic_refusal}"
            )
        if not self.reads_quantized_cache:
            _refuse_quantized_cache(self.name, layout)
        return self.build(layout)


def _refuse_quantized_cache(name: str, layout: "AttentionLayout") -> None:
    from tercet.model.kv_dtypes import is_quantized_kv_dtype, kv_dtype_name

    if is_quantized_kv_dtype(layout.cache_dtype):
        raise ConfigError(
            f'attention.backend {name} cannot read a quantized KV cache (cache.kv_dtype = '
            f'"{kv_dtype_name(layout.cache_dtype)}") in place: use attention.backend = "paged_cpu" on a CPU, '
            'or cache.kv_dtype = "auto"'
        )
