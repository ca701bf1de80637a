"""The file tier and saved sessions in a real server: a session saved, flushed, restored; a server
restarted on the same directory; the routes behind the API key; the tier's figures at /metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

KEY = "kv-storage-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
PAGE = 8
SYSTEM = "You are a careful assistant. " * 12  # a long system prompt: many whole pages
FIRST_TURN = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name three rivers."}]


@pytest.fixture
def start_tiered(start_server, tiny_llama_dir, tmp_path):
    def start():
        settings = ["model.served_model_name=tiny", "cache.max_total_tokens=1024", f"cache.page_size={PAGE}", "scheduler.max_running_requests=4",
                    "cache.storage=file", f"cache.file_dir={tmp_path}"]
        return start_server(tiny_llama_dir, settings, extra_args=["--api-key", KEY])

    return start


def chat(server, messages) -> dict:
    body = {"model": "tiny", "messages": messages, "max_tokens": 6, "temperature": 0}
    response = httpx.post(server.base_url + "/v1/chat/completions", json=body, headers=AUTH, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def next_turn(first: dict) -> list[dict]:
    reply = first["choices"][0]["message"]["content"]
    return [*FIRST_TURN, {"role": "assistant", "content": reply}, {"role": "user", "content": "And three lakes?"}]


def post(server, path: str, body=None, headers=AUTH) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, headers=headers, timeout=120)


def test_a_saved_session_restored_after_a_flush_makes_the_next_turn_prefill_only_its_new_tokens(start_tiered):
    server = start_tiered()
    first = chat(server, FIRST_TURN)
    prompt_tokens = first["usage"]["prompt_tokens"]
    saved = post(server, "/sessions/rivers/save", {"messages": FIRST_TURN})
    assert saved.status_code == 200, saved.text
    assert saved.json()["saved_tokens"] == prompt_tokens // PAGE * PAGE == saved.json()["prefix_tokens"] // PAGE * PAGE
    assert post(server, "/flush_cache", {}).status_code == 200  # the pool forgets it (nothing written down)
    restored = post(server, "/sessions/rivers/restore")
    assert restored.status_code == 200, restored.text
    assert restored.json()["restored_tokens"] == saved.json()["saved_tokens"]
    second = chat(server, next_turn(first))
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= saved.json()["saved_tokens"]


def test_session_routes_need_the_api_key_a_sane_name_and_a_cached_prefix(start_tiered):
    server = start_tiered()
    assert post(server, "/sessions/rivers/save", {"text": "hello"}, headers={}).status_code == 401
    assert post(server, "/sessions/rivers/restore", headers={"Authorization": "Bearer wrong"}).status_code == 401
    for name in (".hidden", "a%20b", "x" * 129, "..."):
        refused = post(server, f"/sessions/{name}/save", {"text": "hello"})
        assert refused.status_code == 400 and "session name" in refused.text, (name, refused.text)
    # A name with a slash, or "..", is no path of the route at all (the client or the router drops it).
    assert post(server, "/sessions/a%2Fb/save", {"text": "hello"}).status_code in (400, 404)
    assert post(server, "/sessions/../save", {"text": "hello"}).status_code == 404
    assert post(server, "/sessions/.hidden/restore").status_code == 400
    assert post(server, "/sessions/never-saved/restore").status_code == 404
    assert post(server, "/sessions/x/save", {"input_ids": [1, 2, 3] * 10}).status_code == 404  # nothing cached
    assert post(server, "/sessions/x/save", {"text": "a", "input_ids": [1]}).status_code == 400


def test_after_a_restart_on_the_file_tier_the_first_turn_prefills_only_its_new_tokens(start_tiered, tmp_path):
    before = start_tiered()
    first = chat(before, FIRST_TURN)
    prompt_tokens = first["usage"]["prompt_tokens"]
    assert before.stop() == 0  # a graceful stop writes the pool's cached prefixes down
    assert list((tmp_path / "pages").iterdir())
    after = start_tiered()
    second = chat(after, next_turn(first))
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= prompt_tokens // PAGE * PAGE
    assert second["usage"]["prompt_tokens"] - cached < second["usage"]["prompt_tokens"] - prompt_tokens + PAGE

    metrics = httpx.get(after.base_url + "/metrics", headers=AUTH, timeout=60).text
    assert re.search(r'tercet:kv_storage_hits_total\{[^}]*tier="file"[^}]*\} 1\.0', metrics), metrics[-3000:]
    assert re.search(r'tercet:kv_storage_pages_read_total\{[^}]*\} [1-9]', metrics)
    dashboard = json.loads((Path(__file__).parents[2] / "docs" / "grafana-dashboard.json").read_text())
    asked = {name for panel in dashboard["panels"] for target in panel["targets"]
             for name in re.findall(r"tercet:kv_storage_[a-z0-9_]+", target["expr"])}
    served = set(re.findall(r"^(tercet:kv_storage_[a-z0-9_]+)[{ ]", metrics, re.M))
    assert asked and asked <= served, asked - served
