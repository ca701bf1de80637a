"""Typed messages for the three edges, and the registry that names them on the wire.

edge 1  TokenizerManager -> Scheduler       TokenizedGenerateReq, TokenizedEmbeddingReq, AbortReq
edge 2  Scheduler -> DetokenizerManager     BatchTokenIDOutput, BatchEmbeddingOutput
edge 3  DetokenizerManager -> TokenizerManager  BatchStrOutput, BatchEmbeddingOutput (passed on as it
        came: an embedding has no text), ContainedFailureReport; from each scheduler,
        RankMetricsReport (tercet.ipc.rank_metrics), EvictedPrefixesReport (tercet.ipc.eviction_reports)

Batches are columns (one list per field) so one message carries a whole step.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields, is_dataclass

from tercet.containment import INTERNAL_FAILURE_STATUS, internal_failure_message
from tercet.errors import TercetError
from tercet.ipc.decode_limits import DEFAULT_DECODE_LIMITS, DecodeLimits
from tercet.ipc.eviction_reports import EVICTION_REPORT_MESSAGE_TYPES
from tercet.ipc.rank_metrics import RANK_METRICS_MESSAGE_TYPES
from tercet.ipc.request_phase_times import REQUEST_PHASE_TIMES_MESSAGE_TYPES, RequestPhaseTimes
from tercet.sampling_params import SamplingParams


class FinishKind(str, enum.Enum):
    """How a request ended. A ``str`` too, so it reads and travels as OpenAI's names do."""

    STOP = "stop"  # EOS, a stop token or a stop string
    LENGTH = "length"  # max_new_tokens, or the context
    ABORT = "abort"  # aborted, refused, or ended by a contained failure

    def __str__(self) -> str:
        return self.value


KINDS_BY_NAME = {kind.value: kind for kind in FinishKind}


@dataclass(frozen=True)
class FinishReason:
    """Why a request ended: its :class:`FinishKind`, and what matched or went wrong."""

    kind: FinishKind
    matched_token: int | None = None
    message: str | None = None
    # For an abort caused by the request itself (it can never fit, say): the
    # HTTP status the client gets.
    status_code: int | None = None
    matched_text: str | None = None
    # For such an abort: the sampling parameter at fault (``json_schema`` for
    # one that cannot be compiled, say); each route names it its own way.
    param: str | None = None

    def __post_init__(self):
        # Decoded messages and plugins may give the kind by its name; anything else is
        # left as it is, for the message check to refuse with the field named.
        if isinstance(self.kind, str) and not isinstance(self.kind, FinishKind) and self.kind in KINDS_BY_NAME:
            object.__setattr__(self, "kind", KINDS_BY_NAME[self.kind])

    @classmethod
    def internal_failure(cls, what: str) -> FinishReason:
        """How a request ended by a contained failure finishes: its client gets a 500 naming ``what``."""
        return cls(FinishKind.ABORT, message=internal_failure_message(what), status_code=INTERNAL_FAILURE_STATUS)

    def to_json(self) -> dict:
        data: dict = {"type": self.kind.value}
        if self.matched_text is not None:
            data["matched"] = self.matched_text
        elif self.matched_token is not None:
            data["matched"] = self.matched_token
        if self.message is not None:
            data["message"] = self.message
        return data


@dataclass(frozen=True)
class TokenLogprobs:
    """Log-probabilities (of the model's distribution, before sampling
    transforms) of a run of tokens: one entry per token, ``None`` where there is
    none (the first prompt token). ``top`` holds, per token, the most likely
    alternatives as ``[token_id, logprob]`` pairs, best first (empty lists when
    not asked for)."""

    token_ids: list[int]
    logprobs: list[float | None]
    top: list[list[list]]

    @staticmethod
    def concat(parts: list["TokenLogprobs | None"]) -> "TokenLogprobs | None":
        present = [part for part in parts if part is not None]
        if not present:
            return None
        token_ids: list[int] = []
        logprobs: list[float | None] = []
        top: list[list[list]] = []
        for part in present:
            token_ids += part.token_ids
            logprobs += part.logprobs
            top += part.top
        return TokenLogprobs(token_ids, logprobs, top)


@dataclass(frozen=True)
class DetokenizeParams:
    """What the detokenizer needs to know about a request, sent with its first output."""

    skip_special_tokens: bool = True
    stop: list[str] = field(default_factory=list)
    no_stop_trim: bool = False


def choice_rid(rid: str, index: int, n: int) -> str:
    """The id of one of ``n`` completions of a request (the request's own id when n == 1)."""
    return rid if n == 1 else f"{rid}#{index}"


@dataclass(frozen=True)
class TokenizedGenerateReq:
    """One prompt; with ``sampling_params.n > 1`` the scheduler runs n completions
    under the ids ``choice_rid(rid, i, n)``, prefilling the prompt once."""

    rid: str
    input_ids: list[int]
    sampling_params: SamplingParams
    stream: bool = False
    priority: int = 0
    tenant: str | None = None
    # The LoRA adapter the request runs with, by name (None: the base model).
    lora_name: str | None = None


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
    # Set on a request's first output only.
    detokenize_params: list[DetokenizeParams | None]
    # Log-probabilities of new_token_ids, where the request asked for them.
    output_logprobs: list[TokenLogprobs | None]
    # Log-probabilities of the prompt, on the first output of requests that asked.
    prompt_logprobs: list[TokenLogprobs | None]
    # Prompt tokens whose KV came from the prefix cache.
    cached_tokens: list[int]
    # On a request's finishing row, when it passed each phase (tercet.ipc.request_phase_times); else None.
    phase_times: list[RequestPhaseTimes | None] = field(default_factory=list)


@dataclass(frozen=True)
class BatchStrOutput:
    """New text of one step: each entry is the delta since the previous message."""

    rids: list[str]
    text_deltas: list[str]
    new_token_ids: list[list[int]]
    finished_reasons: list[FinishReason | None]
    prompt_tokens: list[int]
    completion_tokens: list[int]
    output_logprobs: list[TokenLogprobs | None]
    prompt_logprobs: list[TokenLogprobs | None]
    cached_tokens: list[int]
    # As BatchTokenIDOutput's (empty from a sender that has none).
    phase_times: list[RequestPhaseTimes | None] = field(default_factory=list)


@dataclass(frozen=True)
class TokenizedEmbeddingReq:
    """One input to embed: the scheduler runs it once, whole, and pools its final hidden states."""

    rid: str
    input_ids: list[int]


@dataclass(frozen=True)
class BatchEmbeddingOutput:
    """The embeddings one scheduler step made (or refused), a column per field."""

    rids: list[str]
    # Each vector as little-endian float32 bytes; b"" for a refused input.
    embeddings: list[bytes]
    prompt_tokens: list[int]
    # None for an input that was embedded; otherwise why it was not (an abort with its status code).
    refusals: list[FinishReason | None]


@dataclass(frozen=True)
class ContainedFailureReport:
    """A child without a control channel (the detokenizer) reports each failure
    it contained to the TokenizerManager, which counts them for /get_server_info."""

    component: str
    kind: str
    plugin: str | None = None


CORE_MESSAGE_TYPES = {
    "tercet.sampling_params": SamplingParams,
    "tercet.finish_reason": FinishReason,
    "tercet.token_logprobs": TokenLogprobs,
    "tercet.detokenize_params": DetokenizeParams,
    "tercet.tokenized_generate_req": TokenizedGenerateReq,
    "tercet.abort_req": AbortReq,
    "tercet.batch_token_id_output": BatchTokenIDOutput,
    "tercet.batch_str_output": BatchStrOutput,
    "tercet.tokenized_embedding_req": TokenizedEmbeddingReq,
    "tercet.batch_embedding_output": BatchEmbeddingOutput,
    "tercet.contained_failure_report": ContainedFailureReport,
    **RANK_METRICS_MESSAGE_TYPES,
    **REQUEST_PHASE_TIMES_MESSAGE_TYPES,
    **EVICTION_REPORT_MESSAGE_TYPES,
}


class UnknownMessageError(TercetError):
    """A message type or tag that no plugin registered."""


class MessageRegistry:
    """Two-way map between registered dataclasses and their stable wire tags,
    with the limits every serializer keeps when it decodes (:class:`DecodeLimits`)."""

    def __init__(self, types_by_tag: dict[str, type], limits: DecodeLimits = DEFAULT_DECODE_LIMITS):
        for tag, cls in types_by_tag.items():
            if not is_dataclass(cls):
                raise TypeError(f"message type {tag!r} must be a dataclass, got {cls!r}")
        self.types_by_tag = dict(types_by_tag)
        self.limits = limits
        self.tags_by_type = {cls: tag for tag, cls in types_by_tag.items()}
        self.field_names_by_type = {
            cls: tuple(f.name for f in fields(cls)) for cls in types_by_tag.values()
        }

    @classmethod
    def from_plugin_registries(cls, registries, limits: DecodeLimits = DEFAULT_DECODE_LIMITS) -> "MessageRegistry":
        return cls({tag: reg.obj for tag, reg in registries.message_types.entries.items()}, limits)

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
