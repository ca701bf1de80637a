"""The core message types of the three edges and the control plane, registered like any plugin's."""

from tercet.control_messages import CONTROL_MESSAGE_TYPES
from tercet.hookspecs import hookimpl
from tercet.messages import CORE_MESSAGE_TYPES


@hookimpl
def register_message_types(register):
    for tag, message_type in {**CORE_MESSAGE_TYPES, **CONTROL_MESSAGE_TYPES}.items():
        register(tag, message_type)
