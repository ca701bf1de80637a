"""The factory an attention backend registers: its checks before it is built, said the same way.

Every backend is registered on every machine, so ``tercet plugins`` lists one
that cannot run here, with the reason (``unavailable_reason``); choosing it
anyway fails at start-up with that reason, as does asking it for
``model.deterministic`` when it cannot promise it. Only then is ``build``
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
        return self.build(layout)
