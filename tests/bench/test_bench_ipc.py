"""The IPC round-trip benchmark over real sockets and a real echo process."""

from __future__ import annotations

import json

import pytest

from tercet.bench.ipc_roundtrip import (
    MESSAGE_KINDS,
    format_ipc_report,
    run_ipc_benchmark,
    sample_message,
)
from tercet.cli import main as tercet_main
from tercet.errors import ConfigError, TercetError

NUM_MESSAGES = 200


@pytest.fixture(scope="module")
def result():
    return run_ipc_benchmark(("msgpack", "pickle"), ("ipc",), NUM_MESSAGES, progress=False)


def test_every_serializer_and_message_kind_gets_a_row(result):
    rows = {(row["serializer"], row["transport"], row["message"]) for row in result["results"]}
    assert rows == {(serializer, "ipc", kind) for serializer in ("msgpack", "pickle") for kind in MESSAGE_KINDS}
    assert result["config"]["num_messages"] == NUM_MESSAGES
    json.dumps(result)


def test_figures_are_sane(result):
    for row in result["results"]:
        assert row["num_round_trips"] == NUM_MESSAGES
        assert row["message_bytes"] > 500  # realistic sizes, not empty messages
        assert row["round_trips_per_s"] > 0
        assert row["messages_per_s"] == pytest.approx(2 * row["round_trips_per_s"])
        assert 0 < row["min_us"] <= row["p50_us"] <= row["p99_us"] <= row["max_us"]
        assert row["min_us"] <= row["mean_us"] <= row["max_us"]
        # Even a loaded machine turns a small message around in well under 100 ms.
        assert row["p50_us"] < 100_000
        assert row["encode_us"] > 0 and row["decode_us"] > 0


def test_report_has_one_line_per_row(result):
    report = format_ipc_report(result)
    assert len(report.splitlines()) == 2 + len(result["results"])
    assert "msgpack    ipc       generate_req" in report


def test_tcp_transport_from_the_command_line(capsys):
    assert tercet_main(["bench-ipc", "--serializers", "msgpack", "--transports", "tcp",
                        "--messages", "decode_step",
                 "--num-messages", "50", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["results"]
    assert (row["serializer"], row["transport"], row["message"]) == ("msgpack", "tcp", "decode_step")


def test_unknown_serializer_fails_before_any_process_starts():
    with pytest.raises(ConfigError, match="unknown serializer 'cbor'.*msgpack"):
        run_ipc_benchmark(("cbor",), progress=False)


def test_unknown_message_kind_is_refused():
    with pytest.raises(TercetError, match="unknown message kind"):
        sample_message("nothing")
