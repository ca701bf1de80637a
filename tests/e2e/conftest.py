import pytest

from running_server import RunningServer

# Small pools keep start-up quick and memory low on a 2-core CI machine.
TINY_SETTINGS = ["cache.max_total_tokens=4096", "cache.page_size=8", "scheduler.max_running_requests=8"]


@pytest.fixture(scope="session")
def start_server(tmp_path_factory):
    """Start a real server; every server started is stopped at the end of the session."""
    started: list[RunningServer] = []

    def start(model_path, settings=(), extra_args=()):
        log_path = tmp_path_factory.mktemp("server") / "server.log"
        server = RunningServer(model_path, log_path, list(settings), list(extra_args))
        started.append(server)
        return server.wait_until_healthy()

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def tiny_server(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, TINY_SETTINGS)
