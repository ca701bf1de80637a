"""Which field of the client's own body each field of a translated chat completions body came from.

The Anthropic Messages API and the OpenAI Responses API are translated into a
chat completions body, which the chat completions parser then checks; a
refusal there names a chat completions field (``tools[0].function.parameters``,
``response_format.json_schema.name``, ``messages[3]``). A client that sent
Anthropic's ``tools[0].input_schema`` or the Responses API's ``text.format.name``
must read its own field's name instead. :class:`ClientFields` is that table for
one request: each protocol's fixed rules (a chat field pattern and the client's
field it stands for) and, since a translation adds and merges messages (a
system prompt first, tool results split off a user turn), where each chat
message came from. Every refusal of a bridged request goes through
:meth:`ClientFields.renamed`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tercet.errors import RequestError

# A chat message's field: its index, and the rest of the path.
MESSAGE_FIELD = re.compile(r"messages\[(\d+)\](.*)", re.DOTALL)


@dataclass(frozen=True)
class FieldRule:
    """A chat completions field (a regular expression matched at the start of the param)
    and the client's field it stands for (a replacement template, ``\\1`` for a group)."""

    chat: re.Pattern
    client: str

    @classmethod
    def of(cls, chat: str, client: str) -> "FieldRule":
        # A whole field only: "stop" is not the start of "stop_token_ids".
        return cls(re.compile(chat + r"(?=$|[.\[])"), client)


@dataclass(frozen=True)
class ClientFields:
    """One request's table from the translated chat field back to the field the client sent."""

    rules: tuple[FieldRule, ...]
    # For each chat message, in order: the client's field it was made of ("system", "messages[2]", "input[4]").
    message_fields: tuple[str, ...] = ()
    # What the chat body's "messages" as a whole is called in the client's body.
    messages_field: str = "messages"

    def client_field(self, param: str | None) -> str | None:
        """The client's name for the chat completions field ``param`` (``param`` itself when it is the same)."""
        if param is None:
            return None
        message = MESSAGE_FIELD.fullmatch(param)
        if message is not None:
            return self._message_field(int(message.group(1)), message.group(2))
        if param == "messages":
            return self.messages_field
        for rule in self.rules:
            found = rule.chat.match(param)
            if found is not None:
                return found.expand(rule.client) + param[found.end():]
        return param

    def _message_field(self, index: int, rest: str) -> str:
        if index < len(self.message_fields):
            return self.message_fields[index] + rest
        return self.messages_field

    def renamed(self, error: RequestError) -> RequestError:
        """``error`` naming the client's field, in its param and in its message."""
        client = self.client_field(error.param)
        if client == error.param:
            return error
        message = error.message.replace(error.param, client, 1)
        return type(error)(message, client, error.status_code)


# The fields both protocols spell as chat completions does.
SAME_FIELDS = ClientFields(())
