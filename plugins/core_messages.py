"""The core message types of the three edges and the control plane, registered like any plugin's."""

from tercet.plugin_api import CONTROL_MESSAGE_TYPES, CORE_MESSAGE_TYPES, hookimpl


@hookimpl
def register_message_types(register):
    for tag, message_type in {**CORE_MESSAGE_TYPES, **CONTROL_MESSAGE_TYPES}.items():
        register(tag, message_type)
