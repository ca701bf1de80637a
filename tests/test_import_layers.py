"""The import layers hold: folders import only downwards, and plugins see only tercet.plugin_api.

The layers are written once, as an import-linter contract in pyproject.toml
(``[tool.importlinter]``); import-linter counts every import, those inside
functions included. Plugins (``plugins/``, ``contrib/``) are checked here
file by file, since import-linter only sees the installed ``tercet``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_API = "tercet.plugin_api"
# A built-in plugin may import its own modules (tercet.plugins.<its package>) and what plugins share.
BUILTIN_PLUGINS = "tercet.plugins"


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, anywhere in the file (functions and TYPE_CHECKING blocks too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def tercet_imports_outside(path: Path, allowed_prefixes: tuple[str, ...]) -> list[str]:
    """``"line N: module"`` for each import of a tercet module that none of ``allowed_prefixes`` covers."""
    return [
        f"line {line}: {module}"
        for line, module in imported_modules(path)
        if (module == "tercet" or module.startswith("tercet."))
        and not any(module == prefix or module.startswith(prefix + ".") for prefix in allowed_prefixes)
    ]


def test_the_folders_keep_their_layers():
    linted = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
         "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr


@pytest.mark.parametrize("path", sorted((ROOT / "plugins").rglob("*.py")), ids=lambda path: str(path.relative_to(ROOT)))
def test_a_builtin_plugin_imports_tercet_only_through_the_plugin_api(path):
    assert tercet_imports_outside(path, (PUBLIC_API, BUILTIN_PLUGINS)) == []


@pytest.mark.parametrize("path", sorted((ROOT / "contrib").rglob("*.py")), ids=lambda path: str(path.relative_to(ROOT)))
def test_a_contributed_plugin_imports_tercet_only_through_the_plugin_api(path):
    assert tercet_imports_outside(path, (PUBLIC_API,)) == []


def test_the_plugin_check_sees_imports_inside_functions_and_type_checking_blocks(tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "from typing import TYPE_CHECKING\n"
        "from tercet.plugin_api import hookimpl\n"
        "import tercet.plugins.linear_layers\n"
        "if TYPE_CHECKING:\n    from tercet.model.kv_cache import PagedKVCache\n"
        "def build():\n    from tercet.model.llama import LlamaShape\n"
    )
    assert tercet_imports_outside(plugin, (PUBLIC_API, BUILTIN_PLUGINS)) == [
        "line 5: tercet.model.kv_cache", "line 7: tercet.model.llama",
    ]
