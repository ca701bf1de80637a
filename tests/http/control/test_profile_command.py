"""``tercet profile``'s arguments and body, and what it says when there is no server to ask."""

from __future__ import annotations

import pytest

from tercet.cli import build_parser, main
from tercet.http.control.profile_command import profile_body
from tercet.testing import free_port


def parsed(*arguments: str):
    return build_parser().parse_args(["profile", *arguments])


def test_the_body_says_how_long_where_and_what():
    assert profile_body(parsed("--seconds", "2.5")) == {"seconds": 2.5}
    assert profile_body(parsed("--steps", "10", "--output-dir", "run", "--activities", "cpu, CUDA")) == {
        "num_steps": 10, "output_dir": "run", "activities": ["CPU", "CUDA"]}


def test_a_length_is_needed_and_only_one(capsys):
    for arguments in ([], ["--seconds", "1", "--steps", "3"]):
        with pytest.raises(SystemExit) as refused:
            parsed(*arguments)
        assert refused.value.code == 2
    assert "--seconds" in capsys.readouterr().err


def test_no_server_there_is_an_error_naming_it(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["profile", "--base-url", url, "--seconds", "0.1"]) == 1
    assert f"cannot reach {url}" in capsys.readouterr().err
