"""Plugins a server finds through entry points, without installing them with pip.

Every tercet process (the server and its spawned children) finds plugins
through the ``tercet`` entry-point group of the distributions on its
``sys.path``. A folder holding a ``.dist-info`` with an ``entry_points.txt``
is such a distribution, as pip would leave it; put the folder on a server's
``PYTHONPATH`` and each of its processes loads the plugins named there.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Mapping

from tercet.plugin_host.hookspecs import PROJECT_NAME


def write_plugin_folder(
    folder: Path,
    entry_points: Mapping[str, str],
    modules: Mapping[str, str] = {},
    distribution: str = "tercet-test-plugins",
) -> Path:
    """Write ``modules`` (module name -> source) and a distribution whose ``tercet``
    entry points are ``entry_points`` (plugin name -> module) into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for module, source in modules.items():
        (folder / f"{module}.py").write_text(source)
    dist_info = folder / f"{re.sub(r'[-.]+', '_', distribution)}-0.0.dist-info"
    dist_info.mkdir(exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.0\n")
    lines = [f"[{PROJECT_NAME}]", *(f"{name} = {module}" for name, module in entry_points.items())]
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return folder


def import_root(module: str) -> Path:
    """The ``sys.path`` entry ``module`` is imported from here, for a child process to import it too."""
    top = module.split(":")[0].split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None and not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"plugin module {module!r} cannot be imported here, so a server could not either")
    if spec.submodule_search_locations:  # a package: the folder above it
        return Path(next(iter(spec.submodule_search_locations))).parent
    return Path(spec.origin).parent
