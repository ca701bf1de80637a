"""Installing a contrib distribution into the test environment, as a user would, and removing it."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from packaging.version import Version

CONTRIB = Path(__file__).resolve().parents[2] / "contrib"


def pip(*arguments):
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *arguments],
                   check=True, timeout=300)


def build_options() -> list[str]:
    """Build with this environment's setuptools, offline, when it is recent enough for the
    contrib pyproject files (PEP 639 licence strings need setuptools 77); otherwise in
    pip's isolated build environment, with setuptools from the package index."""
    try:
        if Version(metadata.version("setuptools")) >= Version("77"):
            return ["--no-build-isolation", "--no-index"]
    except metadata.PackageNotFoundError:
        pass
    return []


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
    pip("install", "--no-deps", *build_options(), str(source))
    importlib.invalidate_caches()
    try:
        yield before
    finally:
        pip("uninstall", "-y", distribution)
        _forget(module)
