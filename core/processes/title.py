"""Process titles: what ``ps`` shows for each tercet process (``tercet scheduler dp0 tp1``)."""

from __future__ import annotations

import setproctitle


def set_process_title(title: str) -> None:
    """Name this process in ``ps`` and ``top`` (its command line is replaced)."""
    setproctitle.setproctitle(title)
