from tercet.config import TercetConfig
from tercet.parallel.description import describe_rank, first_difference, first_differing_key


def test_a_node_s_own_place_and_paths_may_differ(tmp_path):
    checkpoint = tmp_path / "model.gguf"
    checkpoint.write_bytes(b"x" * 100)
    here = TercetConfig().replace("model", path=str(checkpoint))
    elsewhere = here.replace("parallel", node_rank=1).replace("server", host="0.0.0.0", port=1)
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(b"y" * 100)
    assert first_difference(describe_rank(here), describe_rank(elsewhere.replace("model", path=str(copy)))) is None


def test_the_checkpoint_is_compared_by_size(tmp_path):
    small, large = tmp_path / "small.gguf", tmp_path / "large.gguf"
    small.write_bytes(b"x")
    large.write_bytes(b"xx")
    described = [describe_rank(TercetConfig().replace("model", path=str(path))) for path in (small, large)]
    assert first_difference(*described) == "checkpoint size: 2 against 1"


def test_the_first_difference_is_named_with_both_values():
    reference = describe_rank(TercetConfig())
    other = describe_rank(TercetConfig().replace("scheduler", max_running_requests=4))
    assert first_difference(reference, other) == "scheduler.max_running_requests: 4 against 32"


def test_the_api_key_is_compared_by_a_digest_keyed_by_the_node_secret():
    with_key = TercetConfig().replace("server", api_key="s3cret")
    described = describe_rank(with_key)
    assert "s3cret" not in repr(described)
    assert described["server.api_key"].startswith("hmac-sha256:")
    assert first_difference(described, describe_rank(TercetConfig().replace("server", api_key="other"))) is not None
    # Whoever overhears one cannot try guesses against it without the node secret.
    keyed = describe_rank(with_key.replace("parallel", node_secret="a node secret of 24 chars"))
    assert keyed["server.api_key"] != described["server.api_key"]


def test_the_node_secret_is_never_described():
    described = describe_rank(TercetConfig().replace("parallel", node_secret="a node secret of 24 chars",
                                                     node_secret_file="/etc/tercet/secret"))
    assert "a node secret" not in repr(described) and "/etc/tercet" not in repr(described)


def test_the_first_differing_key_is_named_without_values():
    reference = describe_rank(TercetConfig())
    other = describe_rank(TercetConfig().replace("scheduler", max_running_requests=4))
    assert first_differing_key(reference, other) == "scheduler.max_running_requests"
    assert first_differing_key(reference, reference) is None
