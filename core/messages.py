"""Typed messages for the three edges, and the registry that names them on the wire.

edge 1  TokenizerManager -> Scheduler       TokenizedGenerateReq, AbortReq
edge 2  Scheduler -> DetokenizerManager     BatchTokenIDOutput
edge 3  DetokenizerManager -> TokenizerManager  BatchStrOutput

Batches are columns (one list per field) so one message carries a whole step.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass

from tercet.errors import TercetError
from tercet.sampling_params import SamplingParams


@dataclass(frozen=True)
class FinishReason:
    """Why a request ended: ``stop`` (EOS or a stop token), ``length`` or ``abort``."""

    kind: str
    matched_token: int | None = None
    message: str | None = None
    # For an abort caused by the request itself (it can never fit, say): the
    # HTTP status the client gets.
    status_code: int | None = None

    def to_json(self) -> dict:
        data: dict = {"type": self.kind}
        if self.matched_token is not None:
            data["matched"] = self.matched_token
        if self.message is not None:
            data["message"] = self.message
        return data


@dataclass(frozen=True)
class TokenizedGenerateReq:
    rid: str
    input_ids: list[int]
    sampling_params: SamplingParams
    stream: bool = False


@dataclass(frozen=True)
class AbortReq:
    """Abort one request; idempotent (an unknown or finished rid is ignored)."""

    rid: str


@dataclass(frozen=True)
class BatchTokenIDOutput:
    """New output token ids of one scheduler step, a column per field."""

    rids: list[str]
    new_token_ids: list[list[int]]
    finished_reasons: list[FinishReason | None]
    prompt_tokens: list[int]
    completion_tokens: list[int]
    skip_special_tokens: list[bool]


@dataclass(frozen=True)
class BatchStrOutput:
    """New text of one step: each entry is the delta since the previous message."""

    rids: list[str]
    text_deltas: list[str]
    new_token_ids: list[list[int]]
    finished_reasons: list[FinishReason | None]
    prompt_tokens: list[int]
    completion_tokens: list[int]


CORE_MESSAGE_TYPES = {
    "tercet.sampling_params": SamplingParams,
    "tercet.finish_reason": FinishReason,
    "tercet.tokenized_generate_req": TokenizedGenerateReq,
    "tercet.abort_req": AbortReq,
    "tercet.batch_token_id_output": BatchTokenIDOutput,
    "tercet.batch_str_output": BatchStrOutput,
}


class UnknownMessageError(TercetError):
    """A message type or tag that no plugin registered."""


class MessageRegistry:
    """Two-way map between registered dataclasses and their stable wire tags."""

    def __init__(self, types_by_tag: dict[str, type]):
        for tag, cls in types_by_tag.items():
            if not is_dataclass(cls):
                raise TypeError(f"message type {tag!r} must be a dataclass, got {cls!r}")
        self.types_by_tag = dict(types_by_tag)
        self.tags_by_type = {cls: tag for tag, cls in types_by_tag.items()}
        self.field_names_by_type = {
            cls: tuple(f.name for f in fields(cls)) for cls in types_by_tag.values()
        }

    @classmethod
    def from_plugin_registries(cls, registries) -> "MessageRegistry":
        return cls({tag: reg.obj for tag, reg in registries.message_types.entries.items()})

    def tag_of(self, message) -> str:
        try:
            return self.tags_by_type[type(message)]
        except KeyError:
            raise UnknownMessageError(f"{type(message).__name__} is not a registered message type") from None

    def type_of(self, tag: str) -> type:
        try:
            return self.types_by_tag[tag]
        except KeyError:
            raise UnknownMessageError(f"unknown message tag {tag!r}") from None

    def is_registered(self, message) -> bool:
        return type(message) in self.tags_by_type
