"""A plugin that raises stays with the requests it touched: a real server, a real installed plugin.

The plugin is installed the way pip would leave it (a module and its
``.dist-info`` with a ``tercet`` entry point) in a folder on the server's
PYTHONPATH, so every process finds it through the entry points. Its policy
raises while a request of priority 13 waits; its detokenizer strategy raises
on the third output of every request that keeps special tokens.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from tercet.testing import TINY_SETTINGS, num_running, num_waiting, wait_for_ranks, write_plugin_folder

PLUGIN_SOURCE = '''
from tercet.plugin_host.hookspecs import hookimpl
from tercet.plugins.incremental_detokenizer import IncrementalDetokenizer
from tercet.scheduler.policy import SchedulingPolicy

POISON_PRIORITY = 13


class FragilePolicy(SchedulingPolicy):
    def order(self, waiting, view):
        if any(req.priority == POISON_PRIORITY for req in waiting):
            raise RuntimeError("a bug in the fragile policy")
        return sorted(waiting, key=lambda req: req.arrival_index)


class FragileDetokenizer(IncrementalDetokenizer):
    """Fails on the third output of a request that keeps special tokens, so
    a stream has started by then."""

    def append(self, rid, token_ids):
        state = self.states[rid]
        if not state.skip_special_tokens and len(state.token_ids) >= 2:
            raise RuntimeError("a bug in the fragile detokenizer")
        return super().append(rid, token_ids)


@hookimpl
def register_scheduling_policies(register):
    register("fragile", FragilePolicy)


@hookimpl
def register_detokenizers(register):
    register("fragile", FragileDetokenizer)
'''
PLUGIN_NAME = "fragile"  # the entry point's name, which pluggy records as the plugin's


@pytest.fixture(scope="module")
def server(start_server, tiny_llama_dir, tmp_path_factory):
    plugin_folder = write_plugin_folder(tmp_path_factory.mktemp("fragile-plugin"), {PLUGIN_NAME: "tercet_fragile"},
                                        modules={"tercet_fragile": PLUGIN_SOURCE}, distribution="tercet-fragile")
    settings = TINY_SETTINGS + ["scheduler.policy=fragile", "detokenizer.strategy=fragile"]
    return start_server(tiny_llama_dir, settings, env={"PYTHONPATH": str(plugin_folder)})


def generate(server, priority=0, skip_special_tokens=True, max_new_tokens=8, stream=False):
    body = {
        "text": "Once upon a time", "priority": priority, "stream": stream,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True,
                            "skip_special_tokens": skip_special_tokens},
    }
    return httpx.post(server.base_url + "/generate", json=body, timeout=120)


def server_info(server) -> dict:
    return httpx.get(server.base_url + "/get_server_info", timeout=30).json()


def test_a_raising_policy_and_a_raising_detokenizer_fail_only_what_they_touched(server):
    # A long request runs throughout; it must come through untouched.
    long_answer = {}
    long_request = threading.Thread(target=lambda: long_answer.update(response=generate(server, max_new_tokens=96)))
    long_request.start()
    wait_for_ranks(server.base_url, lambda ranks: num_running(ranks) == 1)

    poisoned = generate(server, priority=13)  # the policy raises while it waits
    assert poisoned.status_code == 200, poisoned.text
    assert poisoned.json()["meta_info"]["completion_tokens"] == 8

    refused = generate(server, skip_special_tokens=False)  # the strategy raises on it
    assert refused.status_code == 500, refused.text
    error = refused.json()["error"]
    assert error["type"] == "internal_error" and "internal error" in error["message"]

    streamed = generate(server, skip_special_tokens=False, stream=True)
    if streamed.status_code == 200:  # the failure came after the stream started...
        events = [line[len("data: "):] for line in streamed.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert len(events) >= 3 and "text" in json.loads(events[0])
        assert json.loads(events[-2])["error"]["type"] == "internal_error", events  # ...so it is an error event
    else:
        # On a busy machine the API process can read the strategy's failure
        # together with the first outputs, before it commits the stream: then
        # the failure is the answer's own status.
        assert streamed.status_code == 500, streamed.text
        assert streamed.json()["error"]["type"] == "internal_error"

    long_request.join(timeout=300)
    assert long_answer["response"].status_code == 200
    assert long_answer["response"].json()["meta_info"]["completion_tokens"] == 96

    # The failed requests were aborted in the scheduler too: nothing is left running.
    ranks = wait_for_ranks(server.base_url, lambda ranks: num_running(ranks) == num_waiting(ranks) == 0)
    rank_failures = ranks[0]["contained_failures"]
    assert rank_failures["by_kind"]["scheduling_policy"] >= 1
    assert rank_failures["by_plugin"][PLUGIN_NAME] == rank_failures["by_kind"]["scheduling_policy"]
    detokenizer_failures = server_info(server)["contained_failures"]["detokenizer"]
    assert detokenizer_failures["by_kind"]["detokenizer"] == 2
    assert detokenizer_failures["by_plugin"] == {PLUGIN_NAME: 2}

    assert server.process.poll() is None
    assert all(child.is_running() for child in server.child_processes())
    assert "contained failure [scheduling_policy] (plugin 'fragile')" in server.log()
    assert "contained failure [detokenizer] (plugin 'fragile')" in server.log()
    assert generate(server).status_code == 200
