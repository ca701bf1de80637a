"""Tokenizers converted from GGUF files, kept as checkpoint-style directories in tercet's cache.

An entry is named by a digest of the GGUF's resolved path, size and
modification time (and of the format below), so a changed or replaced file
is converted again. Entries are written whole into a staging directory and
renamed into place: a reader sees a complete entry or none, and when several
processes convert at once (the server's three start together) the first
rename wins and the others use it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tercet.formats.default_model import default_cache_dir

logger = logging.getLogger(__name__)

# Bump when the conversion changes, so entries written by older code are not used.
CACHE_FORMAT = 1
CACHE_SUBDIR = "tokenizers"


def cache_key(gguf_path: Path) -> str:
    resolved = gguf_path.resolve()
    stat = resolved.stat()
    identity = f"{CACHE_FORMAT}\0{resolved}\0{stat.st_size}\0{stat.st_mtime_ns}"
    return f"{resolved.stem}-{hashlib.sha256(identity.encode('utf-8', 'surrogateescape')).hexdigest()[:16]}"


def find_cached_tokenizer(gguf_path: Path, cache_dir: Path | None = None) -> Path | None:
    """The complete entry for ``gguf_path``, if there is one."""
    target = _entries(cache_dir) / cache_key(gguf_path)
    return target if target.is_dir() else None


def store_cached_tokenizer(gguf_path: Path, files: dict[str, str], cache_dir: Path | None = None) -> Path | None:
    """Write ``files`` (name -> text) as the entry for ``gguf_path`` and return it; None when the
    cache cannot be written (the caller then builds the tokenizer from ``files`` itself)."""
    entries = _entries(cache_dir)
    target = entries / cache_key(gguf_path)
    staging = None
    try:
        entries.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=entries))
        for name, text in files.items():
            (staging / name).write_text(text, encoding="utf-8")
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary directory
        try:
            os.rename(staging, target)
        except OSError:
            if not target.is_dir():
                raise
            # Another process renamed its entry first: the same files, so that one serves.
    except OSError as error:
        logger.warning("cannot cache the tokenizer of %s in %s (%s); converting it at every start",
                       gguf_path, entries, error)
        return None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return target


@contextlib.contextmanager
def conversion_lock(gguf_path: Path, cache_dir: Path | None = None) -> Iterator[None]:
    """Held while converting ``gguf_path``: another process (or thread) converting it waits here.

    Where the lock file cannot be made (a read-only cache, no ``fcntl``) nobody waits: each
    converts for itself, as the entry's atomic rename allows."""
    try:
        import fcntl

        # Beside the entries, not among them: a lock file stays (removing it would race).
        locks = _entries(cache_dir).parent / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        lock_file = open(locks / f"tokenizer-{cache_key(gguf_path)}.lock", "a+b")  # noqa: SIM115 (held until the end)
    except (ImportError, OSError):
        yield
        return
    with lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _entries(cache_dir: Path | None) -> Path:
    if cache_dir is None:
        cache_dir = default_cache_dir()
    return Path(cache_dir) / CACHE_SUBDIR
