"""A built wheel carries both import packages and registers the built-ins as entry points.

pyproject.toml lists the packages and the built-in plugins' entry points by
hand: a directory left out of it is missing from the wheel, and a plugin left
out is never registered. Two tests compare those lists with the tree. The wheel
also carries the kernels built at every instruction-set level, which a machine
without a compiler loads as they are.
"""

import os
import platform
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tercet.native.cpu import runnable_levels
from tercet.native.levels import levels_of

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def packages_under(package: str, directory: Path) -> set[str]:
    """The import package of every directory under ``directory`` (itself included) that holds a module."""
    folders = [directory, *(path for path in directory.rglob("*") if path.is_dir())]
    return {".".join((package, *folder.relative_to(directory).parts)) for folder in folders if any(folder.glob("*.py"))}


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
    for module in ["tercet/plugin_host/hookspecs.py", "tercet/scheduler/scheduler.py", "tercet/model/llama.py",
                   "tercet/http/server/app.py", "tercet/plugins/msgpack_serializer.py", "tercet/testing/pytest_plugin.py",
                   "tercet/plugins/torch_native_attention/backend.py", "tercet/plugin_api/model.py",
                   # The decode kernel is compiled from its source on the machine that runs it.
                   "tercet/plugins/paged_cpu_attention/decode_attention.c"]:
        assert module in names
    # `tercet plugin new` reads its templates from the installed package.
    assert "tercet/plugin_host/skeleton_templates/pyproject.toml.tmpl" in names
    assert "tercet/plugin_host/skeleton_templates/scheduling_policies/plugin.py.tmpl" in names


def test_the_wheel_declares_the_pytest_plugin(wheel):
    (entry_points,) = [name for name in wheel.namelist() if name.endswith("entry_points.txt")]
    assert "[pytest11]\ntercet = tercet.testing.pytest_plugin" in wheel.read(entry_points).decode()


def test_wheel_registers_builtins_and_the_command(wheel):
    (entry_points,) = [name for name in wheel.namelist() if name.endswith("entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "[tercet]" in text and "msgpack_serializer = tercet.plugins.msgpack_serializer" in text
    assert "tercet = tercet.cli:main" in text


def test_every_package_directory_is_listed():
    setuptools = PYPROJECT["tool"]["setuptools"]
    found = set()
    for package, directory in setuptools["package-dir"].items():
        found |= packages_under(package, ROOT / directory)
    assert sorted(setuptools["packages"]) == sorted(found), "[tool.setuptools] packages and the directories differ"


def test_every_builtin_plugin_module_is_an_entry_point():
    # A plugin is a module plugins/NAME.py or a package plugins/NAME/ whose __init__ implements hooks;
    # a package without hooks (linear_layers) holds code that plugins share.
    modules = {f"tercet.plugins.{path.stem}" for path in (ROOT / "plugins").glob("*.py") if path.stem != "__init__"}
    packages = {f"tercet.plugins.{init.parent.name}" for init in (ROOT / "plugins").glob("*/__init__.py")
                if "@hookimpl" in init.read_text()}
    registered = set(PYPROJECT["project"]["entry-points"]["tercet"].values())
    assert registered == modules | packages, "[project.entry-points.tercet] and the plugins in plugins/ differ"


def test_the_wheel_carries_every_levels_kernels_and_their_sources(wheel):
    """Built on one machine, the wheel holds the built-in kernels at every level of its architecture
    (those this CPU lacks too), and the C sources and per-level headers for a kernel built at first start."""
    names = set(wheel.namelist())
    built = {name.rsplit("/", 1)[1].split("-")[1] for name in names if "/native/prebuilt_kernels/" in name}
    assert built == {level.name for level in levels_of(platform.machine())}
    for header in ["tercet/native/include/tercet_bfloat16.h", "tercet/plugins/linear_layers/block_matmul_avx2.h",
                   "tercet/plugins/linear_layers/block_matmul_neon.h"]:
        assert header in names


def test_installed_without_a_compiler_the_wheel_loads_each_level_this_cpu_runs(wheel, tmp_path):
    """What a wheel gives a machine with no compiler: the block kernel at every level this CPU runs, from the
    wheel's own libraries, with nothing compiled (no compiler on PATH, an empty cache)."""
    wheel.extractall(tmp_path / "site")
    check = """
import tercet
from tercet.native.cpu import runnable_levels
from tercet.plugins.linear_layers.block_matmul import load_kernel
assert tercet.__file__.startswith(%r), tercet.__file__
for level in runnable_levels():
    assert load_kernel(level=level).tercet_block_matmul_level() >= 0
print(" ".join(level.name for level in runnable_levels()))
""" % str(tmp_path / "site")
    environment = dict(os.environ, PYTHONPATH=str(tmp_path / "site"), PATH=str(Path(sys.executable).parent),
                       CC="no-such-compiler", TERCET_CACHE_DIR=str(tmp_path / "cache"))
    ran = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=environment, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.split() == [level.name for level in runnable_levels()]
    assert not (tmp_path / "cache").exists()  # nothing was compiled
