"""Installing a contrib distribution into the test environment, as a user would, and removing it."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

CONTRIB = Path(__file__).resolve().parents[2] / "contrib"


def pip(*arguments):
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *arguments],
                   check=True, timeout=300)


def is_installed(distribution: str) -> bool:
    try:
        metadata.distribution(distribution)
        return True
    except metadata.PackageNotFoundError:
        return False


def _forget(module: str) -> None:
    importlib.invalidate_caches()
    sys.modules.pop(module, None)


@contextmanager
def contrib_installed(distribution: str, module: str, work_dir: Path, snapshot):
    """Install ``contrib/<distribution>``; yield ``snapshot()`` as it was before the install."""
    # A run that was interrupted may have left it installed; the "before" snapshot needs it gone.
    if is_installed(distribution):
        pip("uninstall", "-y", distribution)
    _forget(module)
    before = snapshot()
    # Built from a copy, so the build leaves no build/ or egg-info in the source tree.
    source = work_dir / distribution
    shutil.copytree(CONTRIB / distribution, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip("install", "--no-deps", "--no-build-isolation", "--no-index", str(source))
    importlib.invalidate_caches()
    try:
        yield before
    finally:
        pip("uninstall", "-y", distribution)
        _forget(module)
