"""A built wheel carries both import packages and registers the built-ins as entry points."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    target = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(target), str(ROOT)],
        check=True, timeout=600,
    )
    (built,) = target.glob("tercet-*.whl")
    return zipfile.ZipFile(built)


def test_wheel_has_core_and_plugin_packages(wheel):
    names = set(wheel.namelist())
    for module in ["tercet/hookspecs.py", "tercet/scheduler/scheduler.py", "tercet/model/llama.py",
                   "tercet/http/app.py", "tercet/plugins/msgpack_serializer.py"]:
        assert module in names


def test_wheel_registers_builtins_and_the_command(wheel):
    (entry_points,) = [name for name in wheel.namelist() if name.endswith("entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "[tercet]" in text and "msgpack_serializer = tercet.plugins.msgpack_serializer" in text
    assert "tercet = tercet.cli:main" in text
