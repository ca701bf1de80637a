"""Control-plane messages: requests the TokenizerManager's Communicator sends to
every data-parallel rank, and the reply each rank sends back.

A control request carries a ``request_id``; the scheduler answers every one
with a :class:`ControlReply` straight to the TokenizerManager (not through the
detokenizer). A plugin adds its own control request by subclassing
:class:`ControlRequest`, registering the type (``register_message_types``) and a
scheduler handler (``register_message_handlers``) that returns the reply's
``data``; it then calls it with ``tokenizer_manager.control(MyRequest)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ControlRequest:
    request_id: str


@dataclass(frozen=True)
class ControlReply:
    request_id: str
    rank: int
    ok: bool
    message: str | None = None
    data: dict = field(default_factory=dict)


@dataclass(frozen=True)
class FlushCacheReq(ControlRequest):
    """Empty the prefix cache; refused while any request runs or waits."""


@dataclass(frozen=True)
class GetInternalStateReq(ControlRequest):
    """Each rank's running and waiting requests, KV usage and prefix-cache figures."""


@dataclass(frozen=True)
class PauseGenerationReq(ControlRequest):
    """Stop stepping: requests stay where they are until ContinueGenerationReq."""


@dataclass(frozen=True)
class ContinueGenerationReq(ControlRequest):
    pass


@dataclass(frozen=True)
class AbortAllReq(ControlRequest):
    """Abort every running and waiting request of the rank."""


@dataclass(frozen=True)
class AbortRequestsReq(ControlRequest):
    """Abort the requests ``rids`` and their completions (``rid#i``) wherever they run: how an
    API worker aborts a request another worker holds (it cannot know the rank, nor n)."""

    rids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class UpdateWeightsFromDiskReq(ControlRequest):
    """Reload the weights from a checkpoint directory of the same architecture.

    In-flight requests pause while it loads and then continue; a bad path or
    incompatible checkpoint leaves the old weights serving."""

    model_path: str = ""


@dataclass(frozen=True)
class LoadLoraAdapterReq(ControlRequest):
    """Load the PEFT adapter in directory ``lora_path`` under ``lora_name``; a bad one loads nowhere."""

    lora_name: str = ""
    lora_path: str = ""


@dataclass(frozen=True)
class UnloadLoraAdapterReq(ControlRequest):
    """Unload an adapter; refused (409) while requests use it."""

    lora_name: str = ""


@dataclass(frozen=True)
class ListLoraAdaptersReq(ControlRequest):
    """The rank's LoRA adapters: name, directory, rank, bytes held, requests received."""


@dataclass(frozen=True)
class StartProfileReq(ControlRequest):
    """Start recording a torch profile into ``output_dir`` (an absolute directory the API process
    checked inside ``[server] profile_dir``); ``activities`` some of "CPU", "CUDA" (None: the rank's
    own); it ends by itself after ``num_steps`` model steps (None: at StopProfileReq)."""

    output_dir: str = ""
    activities: list[str] | None = None
    num_steps: int | None = None


@dataclass(frozen=True)
class StopProfileReq(ControlRequest):
    """End the recording and write its trace; the reply's data names the file."""


@dataclass(frozen=True)
class ProfileStatusReq(ControlRequest):
    """Whether the rank is still recording, and the steps it has seen."""


@dataclass(frozen=True)
class SaveSessionReq(ControlRequest):
    """Write the cached prefix ``token_ids`` (pool, then the tier below it) to the saved session ``name``."""

    name: str = ""
    token_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class RestoreSessionReq(ControlRequest):
    """Load the saved session ``name`` into the pool and the prefix cache."""

    name: str = ""


CONTROL_MESSAGE_TYPES = {
    "tercet.control_reply": ControlReply,
    "tercet.flush_cache_req": FlushCacheReq,
    "tercet.get_internal_state_req": GetInternalStateReq,
    "tercet.pause_generation_req": PauseGenerationReq,
    "tercet.continue_generation_req": ContinueGenerationReq,
    "tercet.abort_all_req": AbortAllReq,
    "tercet.abort_requests_req": AbortRequestsReq,
    "tercet.update_weights_from_disk_req": UpdateWeightsFromDiskReq,
    "tercet.load_lora_adapter_req": LoadLoraAdapterReq,
    "tercet.unload_lora_adapter_req": UnloadLoraAdapterReq,
    "tercet.list_lora_adapters_req": ListLoraAdaptersReq,
    "tercet.start_profile_req": StartProfileReq,
    "tercet.stop_profile_req": StopProfileReq,
    "tercet.profile_status_req": ProfileStatusReq,
    "tercet.save_session_req": SaveSessionReq,
    "tercet.restore_session_req": RestoreSessionReq,
}
