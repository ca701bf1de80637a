"""Real servers from tercet_start_server: a config file and a plugin that is not installed reach every process."""

from __future__ import annotations

import httpx
import pytest

from tercet.testing import TINY_SETTINGS

pytestmark = pytest.mark.e2e

POLICY_SOURCE = '''
from tercet.plugin_api import SchedulingPolicy, hookimpl


class NewestFirst(SchedulingPolicy):
    def order(self, waiting, view):
        return sorted(waiting, key=lambda req: req.arrival_index, reverse=True)


@hookimpl
def register_scheduling_policies(register):
    register("kit-newest-first", NewestFirst)
'''


def test_a_server_runs_a_plugin_chosen_in_its_config(tercet_start_server, tiny_llama_dir, tmp_path, monkeypatch):
    (tmp_path / "kit_newest_first.py").write_text(POLICY_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))  # importable here, not installed
    server = tercet_start_server(
        tiny_llama_dir, TINY_SETTINGS[:2],
        config='[scheduler]\npolicy = "kit-newest-first"\nmax_running_requests = 2\n',
        plugins={"kit_newest_first": "kit_newest_first"},
    )
    # The scheduler child built the policy (an unknown name would have stopped the start-up).
    info = httpx.get(server.base_url + "/get_server_info", timeout=30).json()
    assert info["config"]["scheduler"]["policy"] == "kit-newest-first"
    assert info["config"]["scheduler"]["max_running_requests"] == 2
    response = httpx.post(server.base_url + "/generate", timeout=120, json={
        "text": "Hello", "sampling_params": {"max_new_tokens": 3, "temperature": 0, "ignore_eos": True},
    })
    assert response.status_code == 200, response.text
    assert response.json()["meta_info"]["completion_tokens"] == 3
    assert server.stop() == 0, server.log()


def test_a_server_that_cannot_start_says_why(tercet_start_server, tiny_llama_dir):
    with pytest.raises(RuntimeError, match="unknown scheduling policy 'kit-missing'"):
        tercet_start_server(tiny_llama_dir, TINY_SETTINGS + ["scheduler.policy=kit-missing"])
