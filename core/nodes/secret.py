"""The node secret: what every node of a multi-node server holds, and proves it holds.

It comes from ``parallel.node_secret`` or from the first line of
``parallel.node_secret_file`` (never both), and is required whenever
``parallel.nnodes > 1``: without it the join port would take anyone. It is
never sent: nodes prove they hold it by :mod:`tercet.nodes.handshake`. A short
one could be guessed offline from one overheard handshake, hence the minimum.
"""

from __future__ import annotations

from tercet.errors import ConfigError

MIN_SECRET_CHARACTERS = 16
HOW_TO_MAKE_ONE = "make one with `openssl rand -hex 32` and give every node the same"


def read_node_secret(parallel) -> str:
    """``parallel``'s node secret (a :class:`~tercet.config_sections.ParallelConfig`), checked."""
    if parallel.node_secret is not None and parallel.node_secret_file is not None:
        raise ConfigError("set parallel.node_secret or parallel.node_secret_file, not both")
    if parallel.node_secret_file is not None:
        secret, where = _first_line_of(parallel.node_secret_file), f"parallel.node_secret_file ({parallel.node_secret_file})"
    elif parallel.node_secret is not None:
        secret, where = parallel.node_secret, "parallel.node_secret"
    else:
        raise ConfigError(
            f"parallel.nnodes = {parallel.nnodes} needs a node secret, so that only your nodes can join node 0: "
            f"set parallel.node_secret_file (or parallel.node_secret, TERCET_PARALLEL_NODE_SECRET); {HOW_TO_MAKE_ONE}"
        )
    if secret != secret.strip():
        raise ConfigError(f"{where} begins or ends with spaces; nodes that read it without them would be refused")
    if len(secret) < MIN_SECRET_CHARACTERS:
        raise ConfigError(f"{where} has {len(secret)} characters, fewer than {MIN_SECRET_CHARACTERS}; {HOW_TO_MAKE_ONE}")
    return secret


def _first_line_of(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read parallel.node_secret_file {path!r}: {getattr(error, 'strerror', None) or error}") from None
