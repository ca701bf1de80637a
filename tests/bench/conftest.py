"""A real tiny server for the serving benchmark's end-to-end tests.

tests/e2e's fixtures are not visible here, so this re-creates the one needed
from the same ``RunningServer`` helper, found the way tests/e2e finds it.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))


@pytest.fixture(scope="session")
def bench_tiny_server(tmp_path_factory, tiny_llama_dir):
    from running_server import TINY_SETTINGS, RunningServer

    server = RunningServer(tiny_llama_dir, tmp_path_factory.mktemp("bench-server") / "server.log", TINY_SETTINGS)
    try:
        yield server.wait_until_healthy()
    finally:
        server.stop()
