"""What another site's page can make a browser send, against a real server: all of it refused.

A cross-site form POST (urlencoded, multipart or text/plain, the types a form
sends without asking) carries the page's ``Origin``; a DNS-rebinding page
reaches the server under its own name, which the ``Host`` header carries. Each
attempt here is one a browser could be made to send; none may be served, and
the server must be left as it was (not paused, nothing aborted). A second
server allows one origin and one name through ``server.allowed_origins`` /
``server.allowed_hosts``: those pass, with the CORS headers a browser needs.
"""

from __future__ import annotations

import httpx
import pytest

from tercet.testing import TINY_SETTINGS

TIMEOUT = 60
EVIL = "https://evil.example"
STATE_CHANGING = ["/abort_request", "/pause_generation", "/continue_generation", "/flush_cache",
                  "/update_weights_from_disk"]
GENERATING = ["/v1/completions", "/v1/chat/completions", "/generate", "/v1/embeddings"]
FORM_BODIES = {
    "application/x-www-form-urlencoded": b'{"abort_all": true, "prompt": "x"}=',
    "multipart/form-data; boundary=b": b'--b\r\nContent-Disposition: form-data; name="x"\r\n\r\n{}\r\n--b--\r\n',
    "text/plain": b'{"abort_all": true, "prompt": "x", "text": "x", "input": "x"}',
}


def attempts(port: int) -> list[tuple[str, str, dict, bytes | None]]:
    """(method, path, headers, body) of every cross-site request a page could make a browser send."""
    found = []
    for path in STATE_CHANGING + GENERATING:
        for content_type, body in FORM_BODIES.items():
            found.append(("POST", path, {"origin": EVIL, "content-type": content_type}, body))
            # A browser that sent no Origin (an old one, or a privacy setting): the body's type still gives it away.
            found.append(("POST", path, {"content-type": content_type}, body))
        found.append(("POST", path, {"origin": "null"}, None))  # a sandboxed frame's fetch, no body
        found.append(("POST", path, {"origin": EVIL}, None))
    rebound = f"evil.example:{port}"
    for path in ["/v1/models", "/get_server_info", "/metrics", "/"]:
        found.append(("GET", path, {"host": rebound}, None))  # a same-origin fetch sends no Origin
    for path in STATE_CHANGING + GENERATING:
        found.append(("POST", path, {"host": rebound, "origin": f"http://{rebound}", "content-type": "application/json"},
                      b'{"abort_all": true, "prompt": "x", "text": "x", "input": "x", "messages": []}'))
    return found


def send(base_url: str, method: str, path: str, headers: dict, body: bytes | None) -> httpx.Response:
    return httpx.request(method, base_url + path, headers=headers, content=body, timeout=TIMEOUT)


def test_no_cross_site_request_is_served(tiny_server, record_property):
    tried = attempts(tiny_server.port)
    answers = [(attempt, send(tiny_server.base_url, *attempt)) for attempt in tried]
    accepted = [(method, path, headers, response.status_code) for (method, path, headers, _), response in answers
                if response.status_code not in (403, 415)]
    record_property("cross_site_requests_tried", len(tried))
    record_property("cross_site_requests_accepted", len(accepted))
    print(f"\n{len(tried)} cross-site requests tried, {len(accepted)} accepted")
    assert not accepted
    for _, response in answers:
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    info = httpx.get(tiny_server.base_url + "/get_server_info", timeout=TIMEOUT).json()
    assert not any(rank["is_paused"] for rank in info["ranks"]), info


def test_the_servers_own_names_and_clients_are_served(tiny_server):
    body = {"prompt": "Hi", "max_tokens": 2}
    port = tiny_server.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        own_page = {"host": host, "origin": f"http://{host}"}
        response = httpx.post(tiny_server.base_url + "/v1/completions", json=body, headers=own_page, timeout=TIMEOUT)
        assert response.status_code == 200, response.text
    charset = {"content-type": "application/json; charset=utf-8"}
    response = httpx.post(tiny_server.base_url + "/v1/completions", content=b'{"prompt": "Hi", "max_tokens": 2}',
                          headers=charset, timeout=TIMEOUT)
    assert response.status_code == 200, response.text


@pytest.fixture(scope="module")
def opened_server(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, [*TINY_SETTINGS, "server.allowed_origins=https://app.example",
                                         "server.allowed_hosts=api.example"])


def test_allowed_origins_and_hosts_are_served_with_cors_headers(opened_server):
    base_url = opened_server.base_url
    app = {"origin": "https://app.example", "host": f"api.example:{opened_server.port}"}
    preflight = httpx.options(base_url + "/v1/completions", timeout=TIMEOUT, headers={
        **app, "access-control-request-method": "POST", "access-control-request-headers": "content-type"})
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "https://app.example"
    served = httpx.post(base_url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, headers=app,
                        timeout=TIMEOUT)
    assert served.status_code == 200, served.text
    assert served.headers["access-control-allow-origin"] == "https://app.example"
    other = httpx.post(base_url + "/pause_generation", headers={"origin": EVIL}, timeout=TIMEOUT)
    assert other.status_code == 403 and "server.allowed_origins" in other.json()["error"]["message"]
