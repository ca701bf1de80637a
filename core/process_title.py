"""Process titles: what ``ps`` shows for each tercet process (``tercet scheduler dp0 tp1``)."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def set_process_title(title: str) -> None:
    """Name this process in ``ps`` and ``top``; without setproctitle, only the kernel's short name is set."""
    try:
        import setproctitle
    except ImportError:  # pragma: no cover - a declared dependency; kept working without it
        _set_kernel_name(title)
        return
    setproctitle.setproctitle(title)


def _set_kernel_name(title: str) -> None:
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        PR_SET_NAME = 15
        libc.prctl(PR_SET_NAME, title.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        logger.debug("could not set the process name", exc_info=True)
