"""The cross compiler and user-mode qemu that the aarch64 tests build and run with.

Without them those tests skip, naming what is missing, except under CI=true, where
they fail (Debian's gcc-aarch64-linux-gnu and qemu-user; .ci/run installs them).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOST_COMPILER = os.environ.get("CC", "gcc")
COMPILER, OBJDUMP, QEMU = "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-objdump", "qemu-aarch64"
# tercet's kernel headers (tercet_bfloat16.h …), on every build's include path.
NATIVE_INCLUDE = ("-I", str(REPO / "core" / "native" / "include"))


def require_tools() -> None:
    missing = [tool for tool in (HOST_COMPILER, COMPILER, OBJDUMP, QEMU) if shutil.which(tool) is None]
    if missing:
        message = f"missing {', '.join(missing)} (Debian: apt-get install gcc-aarch64-linux-gnu qemu-user)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
