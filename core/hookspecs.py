"""Every hook tercet calls, each documented.

Component hooks use the register-callback form: tercet calls the hook with a
``register(name, obj)`` callable and each plugin registers as many named
implementations as it likes. Registration records which plugin provided what,
so ``tercet plugins`` can show it and an unknown name can list the choices.

Plugins are loaded in every process (children are spawned and rebuild their
plugin manager from entry points), so a plugin module should import heavy
libraries lazily, inside the objects it registers.
"""

from __future__ import annotations

import pluggy

PROJECT_NAME = "tercet"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def register_serializers(register):
    """Register message serializers, chosen by ``[ipc] serializer``.

    ``register(name, factory)`` where ``factory(message_registry)`` returns an
    object with ``encode(message) -> bytes`` and ``decode(bytes) -> message``.
    A serializer must only ever produce instances of types in the registry:
    an unknown tag is an error, never an arbitrary object.
    """


@hookspec
def register_transports(register):
    """Register IPC transports, chosen by ``[ipc] transport``.

    ``register(name, factory)`` where ``factory(ipc_config)`` returns an object
    with ``endpoint(name: str, runtime_dir: str) -> str``: the ZeroMQ address
    for the named edge (for example ``ipc://…`` or ``tcp://host:port``).
    Endpoints are named once, in :class:`tercet.port_args.PortArgs`, before
    any process starts.
    """


@hookspec
def register_scheduling_policies(register):
    """Register scheduling policies, chosen by ``[scheduler] policy``.

    ``register(name, factory)`` where ``factory(config)`` takes the resolved
    :class:`tercet.config.TercetConfig` (a policy reads its own options from
    ``config.plugins[<name>]``) and returns a
    :class:`tercet.scheduler.policy.SchedulingPolicy`: ``order(waiting, view)``
    gives the waiting requests in the order to try admitting them (the
    scheduler admits in that order while KV memory, the batch cap and the
    step's prefill budget allow), and ``choose_preemption_victim(candidate,
    running)`` may name a running request to send back to the queue.
    """


@hookspec
def register_detokenizers(register):
    """Register detokenization strategies, chosen by ``[detokenizer] strategy``.

    ``register(name, factory)`` where ``factory(tokenizer)`` returns an object
    with ``start(rid, skip_special_tokens)``, ``append(rid, token_ids) -> str``
    (the new, complete text since the previous call) and ``finish(rid) -> str``
    (any text held back, flushed; the strategy then drops the request's state).
    ``finish`` is called for every request that was started, aborted ones included.
    """


@hookspec
def register_attention_backends(register):
    """Register attention backends, chosen by ``[attention] backend``.

    ``register(name, factory)`` where ``factory(layout)`` takes a
    :class:`tercet.model.attention.AttentionLayout` and returns a
    :class:`tercet.model.attention.AttentionBackend`: attention of a whole
    batch over the paged KV cache, one call per layer per step.
    """


@hookspec
def register_message_types(register):
    """Register IPC message types under stable tags.

    ``register(tag, cls)`` where ``cls`` is a dataclass. Tags are part of the
    wire format: never reuse or change one. Only registered types cross a
    process boundary.
    """


@hookspec
def register_message_handlers(component, register):
    """Register handlers for incoming messages of one component.

    ``component`` is ``"scheduler"``, ``"detokenizer"`` or ``"tokenizer"``.
    ``register(message_type, handler)`` where ``handler(manager, message)``
    is called by that manager's :class:`TypeBasedDispatcher` for every
    incoming message of that type (the type must also be registered through
    ``register_message_types`` to cross a process boundary).
    """


@hookspec
def register_http_routes(register):
    """Register extra HTTP routes on the API server.

    ``register(path, endpoint, methods)`` where ``endpoint(request,
    tokenizer_manager)`` is an async function returning a starlette response.
    """


@hookspec
def tercet_startup(component, config):
    """Called once in each process after it started, before it serves.

    ``component`` is ``"server"``, ``"scheduler"`` or ``"detokenizer"``;
    ``config`` is the resolved :class:`tercet.config.TercetConfig`.
    """


@hookspec
def tercet_shutdown(component):
    """Called once in each process as it stops, in reverse start order."""
