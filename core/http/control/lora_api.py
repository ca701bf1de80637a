"""LoRA adapters over HTTP: which adapter a request names, loading and unloading, listing.

A request picks an adapter by name: OpenAI's routes by ``model`` (the served
model's name is the base; any other name is an adapter), ``/generate`` by
SGLang's ``lora_path`` or ``lora_name``. The name travels in the request's
message to the scheduler, which knows which adapters are loaded and answers a
404 naming them for one it does not know. ``POST /load_lora_adapter`` and
``POST /unload_lora_adapter`` go to every data-parallel rank; a load that
fails on one rank is undone on the others, so every rank serves the same adapters.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tercet.errors import RequestError
from tercet.field_checks import check_non_empty_text
from tercet.http.errors import read_json_object
from tercet.ipc.control_messages import ListLoraAdaptersReq, LoadLoraAdapterReq, UnloadLoraAdapterReq

ADAPTER_FIELDS = ("lora_name", "lora_path")


def adapter_of_model(body: dict, tokenizer_manager) -> tuple[str, str | None]:
    """For an OpenAI body: the model name it is checked against, and the adapter its ``model`` names (None: the base)."""
    served, model = tokenizer_manager.served_model_name, body.get("model")
    if not tokenizer_manager.serves_lora or not isinstance(model, str) or model in ("", served):
        return served, None
    check_non_empty_text(model, "model")
    return model, model


def adapter_of_native(body: dict) -> str | None:
    """``/generate``'s adapter: ``lora_path`` or ``lora_name`` (SGLang takes the adapter's name in either)."""
    named = {}
    for field in ADAPTER_FIELDS:
        value = body.get(field)
        if value is not None:
            if not isinstance(value, str):
                raise RequestError(f"{field} must be the name of a loaded LoRA adapter (one per request)", field)
            check_non_empty_text(value, field)
            named[field] = value
    if len(set(named.values())) > 1:
        raise RequestError("lora_path and lora_name name different adapters; send one", "lora_name")
    return next(iter(named.values()), None)


async def load_lora_adapter(request: Request, tokenizer_manager) -> Response:
    body = await read_json_object(request)
    name, path = _text_field(body, "lora_name"), _text_field(body, "lora_path")
    replies = await tokenizer_manager.control(LoadLoraAdapterReq, timeout=600.0, lora_name=name, lora_path=path)
    failed = [reply for reply in replies if not reply.ok]
    if failed:
        loaded = [reply for reply in replies if reply.ok]
        if loaded:  # nothing half-way: the ranks that took it drop it again
            await tokenizer_manager.control(UnloadLoraAdapterReq, lora_name=name)
        raise _refusal(failed)
    return JSONResponse({"ok": True, **replies[0].data, "num_ranks": len(replies)})


async def unload_lora_adapter(request: Request, tokenizer_manager) -> Response:
    body = await read_json_object(request)
    name = _text_field(body, "lora_name")
    replies = await tokenizer_manager.control(UnloadLoraAdapterReq, lora_name=name)
    failed = [reply for reply in replies if not reply.ok]
    if failed:
        raise _refusal(failed)
    return JSONResponse({"ok": True, "name": name, "num_ranks": len(replies)})


async def loaded_adapters(tokenizer_manager) -> list[dict]:
    """The adapters rank 0 serves (every rank serves the same ones); none when LoRA is off."""
    if not tokenizer_manager.serves_lora:
        return []
    replies = await tokenizer_manager.control(ListLoraAdaptersReq)
    return replies[0].data.get("adapters", []) if replies and replies[0].ok else []


def _text_field(body: dict, field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str):
        raise RequestError(f"{field} must be a string", field)
    check_non_empty_text(value, field)
    return value


def _refusal(failed) -> RequestError:
    """The first refusal's status (404 unknown, 409 in use, 400 bad adapter), every rank's reason."""
    status = failed[0].data.get("status_code", 400)
    reasons = "; ".join(f"rank {reply.rank}: {reply.message}" for reply in failed)
    return RequestError(reasons, "lora_name", status)
