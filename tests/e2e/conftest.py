import pytest
from running_server import TINY_SETTINGS, RunningServer


@pytest.fixture(scope="session")
def start_server(tmp_path_factory):
    """Start a real server; every server started is stopped at the end of the session."""
    started: list[RunningServer] = []

    def start(model_path, settings=(), extra_args=(), env=None):
        log_path = tmp_path_factory.mktemp("server") / "server.log"
        server = RunningServer(model_path, log_path, list(settings), list(extra_args), env)
        started.append(server)
        return server.wait_until_healthy()

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def tiny_server(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, TINY_SETTINGS)
