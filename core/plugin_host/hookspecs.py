"""Every hook tercet calls, each documented.

Component hooks use the register-callback form: tercet calls the hook with a
``register(name, obj)`` callable and each plugin registers as many named
implementations as it likes. Registration records which plugin provided what,
so ``tercet plugins`` can show it and an unknown name can list the choices.
The component hooks are made from the table of component kinds
(:mod:`tercet.plugin_host.kinds`), whose entries hold their documentation;
register hooks cannot be wrappers, and a hook implementation whose name is not
a hook here is an error at start-up.

Plugins are loaded in every process (children are spawned and rebuild their
plugin manager from entry points), so a plugin module should import heavy
libraries lazily, inside the objects it registers.
"""

from __future__ import annotations

import pluggy

from tercet.plugin_host.kinds import COMPONENT_KINDS, ComponentKind

PROJECT_NAME = "tercet"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


def _component_hookspec(kind: ComponentKind):
    def register_components(register):
        pass

    register_components.__name__ = register_components.__qualname__ = kind.hook
    register_components.__doc__ = kind.doc
    return hookspec(register_components)


# register_serializers, register_transports, register_scheduling_policies,
# register_detokenizers, register_attention_backends, register_http_routes,
# register_message_types and the rest: one per entry of the table of component
# kinds, documented there.
for _kind in COMPONENT_KINDS:
    globals()[_kind.hook] = _component_hookspec(_kind)
del _kind


@hookspec
def register_message_handlers(component, register):
    """Register handlers for incoming messages of one component.

    ``component`` is ``"scheduler"``, ``"detokenizer"`` or ``"tokenizer"``.
    ``register(message_type, handler)`` where ``handler(manager, message)``
    is called by that manager's :class:`TypeBasedDispatcher` for every
    incoming message of that type (the type must also be registered through
    ``register_message_types`` to cross a process boundary). In the scheduler
    ``manager`` is a read-only :class:`tercet.plugin_api.SchedulerStats`
    snapshot, never the scheduler itself; elsewhere it is the manager. A
    handler that raises loses that message only.
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
