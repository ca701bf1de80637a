"""The names saved sessions may have: a file name that can never be a path elsewhere."""

from __future__ import annotations

import re

from tercet.errors import RequestError

# Letters, digits, "_", "-" and "." (not first: no hidden files, no ".."), at most 128 of them.
SESSION_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")


def check_session_name(name: object) -> str:
    """``name`` itself when it is a session name; a 400 saying what one is otherwise."""
    if not isinstance(name, str) or SESSION_NAME.fullmatch(name) is None:
        raise RequestError("a session name is 1 to 128 of A-Z a-z 0-9 _ . - and does not start with a dot",
                           "name")
    return name
