"""The OpenAPI path items of saved sessions (tercet.http.control.session_api)."""

from __future__ import annotations

from tercet.http.openapi.openapi_operations import json_content, operation, request_body, responses
from tercet.http.openapi.openapi_schemas import object_schema

# Counts and ids fit in 31 bits (every integer of the document is bounded).
MAX_TOKEN_ID = MAX_COUNT = 2**31 - 1
_COUNT = {"type": "integer", "minimum": 0, "maximum": MAX_COUNT}
_NAME = [{"name": "name", "in": "path", "required": True,
          "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$"}}]
_PREFIX = object_schema({
    "messages": {"type": "array", "items": {"type": "object"}, "minItems": 1,
                 "description": "the conversation's last request's messages (rendered with the generation prompt)"},
    "text": {"type": "string", "minLength": 1, "description": "a prompt, tokenized as /generate does"},
    "input_ids": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": MAX_TOKEN_ID},
                  "minItems": 1},
})
_SAVED = json_content(object_schema({"ok": {"type": "boolean"}, "name": {"type": "string"},
                                     "saved_tokens": _COUNT, "prefix_tokens": _COUNT}),
                      "the prefix's cached tokens, written to the file tier under the name")
_RESTORED = json_content(object_schema({"ok": {"type": "boolean"}, "name": {"type": "string"},
                                        "restored_tokens": _COUNT}),
                         "the session's tokens now in every rank's prefix cache")
SAVE_SESSION = {"post": {
    **operation("saveSession", "Save a conversation's cached prefix under a name (needs the file tier)",
                responses(_SAVED, "400", "401", "404", "413", "500"), request_body(_PREFIX)),
    "parameters": _NAME,
}}
RESTORE_SESSION = {"post": {
    **operation("restoreSession", "Load a saved session into the prefix cache",
                responses(_RESTORED, "400", "401", "404", "409", "500")),
    "parameters": _NAME,
}}
