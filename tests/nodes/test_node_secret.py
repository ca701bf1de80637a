import pytest

from tercet.config import ParallelConfig
from tercet.errors import ConfigError
from tercet.nodes.secret import read_node_secret

SECRET = "a node secret of 24 chars"


def test_the_secret_is_the_setting_or_the_first_line_of_its_file(tmp_path):
    assert read_node_secret(ParallelConfig(nnodes=2, node_secret=SECRET)) == SECRET
    secret_file = tmp_path / "secret"
    secret_file.write_text(f"{SECRET}\r\nignored\n")
    assert read_node_secret(ParallelConfig(nnodes=2, node_secret_file=str(secret_file))) == SECRET


@pytest.mark.parametrize("settings, error", [
    ({}, "parallel.nnodes = 2 needs a node secret"),
    ({"node_secret": SECRET, "node_secret_file": "/x"}, "set parallel.node_secret or parallel.node_secret_file, not both"),
    ({"node_secret": "short"}, "parallel.node_secret has 5 characters, fewer than 16; make one with `openssl rand"),
    ({"node_secret": f" {SECRET}"}, "parallel.node_secret begins or ends with spaces"),
    ({"node_secret_file": "/nonexistent/secret"}, "cannot read parallel.node_secret_file '/nonexistent/secret': No such"),
])
def test_a_missing_weak_or_ambiguous_secret_is_a_start_up_error(settings, error):
    with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
        read_node_secret(ParallelConfig(nnodes=2, **settings))
