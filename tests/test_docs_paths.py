"""Every module, file and test the docs name exists, so the docs cannot drift from the tree unseen."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tercet.frontend.request_traces import TRACE_NAMES
from tercet.ipc.control_messages import CONTROL_MESSAGE_TYPES
from tercet.ipc.messages import CORE_MESSAGE_TYPES

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "contrib" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REPOSITORY_PATH = re.compile(r"(?<![\w./-])((?:core|plugins|tests|benchmarks|contrib|docs)/[\w./-]*[\w/])")
DOTTED_NAME = re.compile(r"(?<![\w./-])(tercet(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
TEST_FILE = re.compile(r"(?<![\w./-])((?:[\w-]+/)*test_\w+\.py)")
# Names that look like modules but are not: wire tags of messages, request traces' span and attribute
# names, and the config file's usual name.
NOT_MODULES = {*CORE_MESSAGE_TYPES, *CONTROL_MESSAGE_TYPES, *TRACE_NAMES, "tercet.toml"}
# Files of a package `tercet plugin new` writes (docs/plugins.md shows them), not of this repository.
GENERATED_FILES = {"tests/test_plugin.py", "test_plugin.py", "shortest-first/tests/test_tercet_shortest_first.py"}


def _resolves(name: str) -> bool:
    """A module, or an attribute of one (``tercet.plugin_api.SamplingParams``)."""
    parts = name.split(".")
    for length in (len(parts), len(parts) - 1):
        try:
            if length > 1 and importlib.util.find_spec(".".join(parts[:length])) is not None:
                return True
        except ModuleNotFoundError:
            continue
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_every_repository_path_a_doc_names_exists(doc):
    text = doc.read_text()
    named = {match.rstrip("/.") for match in REPOSITORY_PATH.findall(text) if "<" not in match and "*" not in match}
    # docs/reliability.md names its tests relative to tests/, as it says.
    missing = [path for path in named - GENERATED_FILES if not (ROOT / path).exists() and not (ROOT / "tests" / path).exists()]
    assert sorted(missing) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_every_module_a_doc_names_can_be_imported(doc):
    named = set(DOTTED_NAME.findall(doc.read_text())) - NOT_MODULES
    assert sorted(name for name in named if not _resolves(name)) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_every_test_file_a_doc_names_exists_under_tests(doc):
    named = set(TEST_FILE.findall(doc.read_text())) - GENERATED_FILES
    missing = [name for name in named if not (ROOT / name).exists() and not (ROOT / "tests" / name).exists()]
    assert sorted(missing) == []


def test_the_check_catches_a_path_that_moved(tmp_path):
    stale = "See `core/tokenizer_manager.py` and `tercet.tokenizer_manager.TokenizerManager`."
    assert REPOSITORY_PATH.findall(stale) == ["core/tokenizer_manager.py"]
    assert not (ROOT / "core/tokenizer_manager.py").exists()
    assert not _resolves("tercet.tokenizer_manager.TokenizerManager")
    assert _resolves("tercet.frontend.tokenizer_manager.TokenizerManager")
