"""What the served model can do, as its scheduler reports it when ready: the API refuses the rest.

A decoder generates, and embeds when it has a pooling (``[model] pooling``);
an encoder-only model (BERT) only embeds. The scheduler finds out when it
loads the model; the TokenizerManager learns it from the ready report, so it
answers a request the model cannot serve with a 400 at once, before any
tokenizing.
"""

from __future__ import annotations

from dataclasses import dataclass

from tercet.formats.pooling_spec import Pooling

# What a request for something the model cannot do is refused with (400), by the API and the scheduler alike.
NO_POOLING = (
    "this model serves no embeddings: it is a decoder and [model] pooling is none; set [model] pooling = "
    '"last" or "mean" (--set model.pooling=mean) to pool its final hidden states'
)
ENCODER_CANNOT_GENERATE = (
    "this model is encoder-only: it cannot generate text; it serves embeddings (POST /v1/embeddings)"
)


@dataclass(frozen=True)
class ModelAbilities:
    can_generate: bool = True
    # How embeddings are pooled; None: the model serves none.
    pooling: Pooling | None = None
    # The length of each embedding (the model's hidden size).
    embedding_size: int | None = None

    @property
    def can_embed(self) -> bool:
        return self.pooling is not None

    @classmethod
    def of(cls, model_runner) -> ModelAbilities:
        return cls(model_runner.can_generate, model_runner.pooling, model_runner.embedding_size)

    def as_dict(self) -> dict:
        """Plain values for the ready report (what ``from_dict`` reads back)."""
        return {
            "can_generate": self.can_generate,
            "pooling": None if self.pooling is None else self.pooling.as_dict(),
            "embedding_size": self.embedding_size,
        }

    @classmethod
    def from_dict(cls, info: dict) -> ModelAbilities:
        pooling = info.get("pooling")
        return cls(
            can_generate=info.get("can_generate", True),
            pooling=None if pooling is None else Pooling(**pooling),
            embedding_size=info.get("embedding_size"),
        )
