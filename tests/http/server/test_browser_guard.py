"""The browser guard: what another site's page can make a browser send is refused."""

from __future__ import annotations

import httpx
import pytest
from http_stand_in import MODEL, StandInTokenizerManager, client_for

from tercet.http.server.app import create_app
from tercet.http.server.browser_guard import Authority, HostNames, is_own_origin
from tercet.ipc.control_messages import AbortAllReq

pytestmark = pytest.mark.anyio
ERROR_KEYS = {"message", "type", "param", "code"}
FORM = {"content-type": "application/x-www-form-urlencoded"}


def assert_refused(response: httpx.Response, status: int, named: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == ERROR_KEYS and named in error["message"], error


async def test_a_foreign_origin_is_refused_before_anything_runs():
    manager = StandInTokenizerManager()
    async with client_for(create_app(manager)) as client:
        refused = await client.post("/abort_request", json={"abort_all": True},
                                    headers={"origin": "https://evil.example"})
        assert_refused(refused, 403, "server.allowed_origins")
        assert "'https://evil.example'" in refused.json()["error"]["message"]
        for origin in ("null", "http://localhost:8080", "https://localhost"):  # another port or scheme is another origin
            assert_refused(await client.get("/v1/models", headers={"origin": origin}), 403, "is not this server's")
    assert AbortAllReq not in manager.controls


async def test_the_servers_own_pages_and_clients_without_origin_pass():
    async with client_for(create_app(StandInTokenizerManager())) as client:
        assert (await client.get("/v1/models")).status_code == 200
        assert (await client.get("/v1/models", headers={"origin": "http://localhost"})).status_code == 200
        body = {"model": MODEL, "prompt": "Say"}
        same_origin = await client.post("http://127.0.0.1:30000/v1/completions", json=body,
                                         headers={"origin": "http://127.0.0.1:30000"})
        assert same_origin.status_code == 200, same_origin.text


@pytest.mark.parametrize("host", ["evil.example", "evil.example:30000", "localhost.evil.example", "bad:port"])
async def test_a_name_that_is_not_the_servers_is_refused(host):
    async with client_for(create_app(StandInTokenizerManager())) as client:
        response = await client.get("/v1/models", headers={"host": host})
        assert_refused(response, 403, "server.allowed_hosts")
        # The same page's own-origin POST: a rebinding page looks same-origin, the name still gives it away.
        abort = await client.post("/abort_request", json={"abort_all": True},
                                  headers={"host": host, "origin": f"http://{host}"})
        assert_refused(abort, 403, "server.allowed_hosts")


@pytest.mark.parametrize("host", ["localhost:30000", "127.0.0.1:30000", "[::1]:30000", "10.1.2.3:8080", "LOCALHOST"])
async def test_loopback_names_and_any_address_pass(host):
    async with client_for(create_app(StandInTokenizerManager())) as client:
        assert (await client.get("/v1/models", headers={"host": host})).status_code == 200


async def test_health_probes_answer_under_any_name():
    async with client_for(create_app(StandInTokenizerManager())) as client:
        assert (await client.get("/health", headers={"host": "lb-probe.internal"})).status_code == 200


def test_the_names_of_a_server_follow_where_it_is_bound():
    named = HostNames.of_server("api.internal")
    assert named.allows("api.internal") and not named.allows("localhost") and named.allows("192.0.2.7")
    everywhere = HostNames.of_server("0.0.0.0", ["tercet.svc"])
    assert all(everywhere.allows(name) for name in ("localhost", "::1", "tercet.svc"))
    assert not everywhere.allows("evil.example")
    assert HostNames.of_server("127.0.0.1", ["*"]).allows("anything.example")


def test_own_origin_is_the_same_scheme_host_and_port():
    assert is_own_origin("http://api.example.com", Authority.parse("api.example.com"))
    assert is_own_origin("http://api.example.com:80", Authority.parse("api.example.com"))
    assert is_own_origin("https://api.example.com", Authority.parse("api.example.com:443"), "https")
    # Behind a proxy that ends TLS the server sees http: the public origin goes in server.allowed_origins.
    assert not is_own_origin("https://api.example.com", Authority.parse("api.example.com"))
    assert not is_own_origin("http://api.example.com", Authority.parse("api.example.com:30000"))
    assert not is_own_origin("ftp://api.example.com", Authority.parse("api.example.com"), "ftp")
    assert not is_own_origin("http://api.example.com:x", Authority.parse("api.example.com"))


async def test_allowed_origins_and_hosts_pass_with_cors_headers_and_a_preflight_without_the_key():
    app = create_app(StandInTokenizerManager(), api_key="k", allowed_origins=["https://app.example"],
                     allowed_hosts=["api.example"])
    headers = {"origin": "https://app.example", "host": "api.example"}
    async with client_for(app) as client:
        preflight = await client.options("/v1/completions", headers={
            **headers, "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type",
        })
        assert preflight.status_code == 200, preflight.text
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        allowed = await client.get("/v1/models", headers={**headers, "authorization": "Bearer k"})
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "https://app.example"
        other = await client.get("/v1/models", headers={"origin": "https://other.example", "authorization": "Bearer k"})
        assert_refused(other, 403, "server.allowed_origins")


async def test_any_origin_with_a_star():
    async with client_for(create_app(StandInTokenizerManager(), allowed_origins=["*"])) as client:
        response = await client.get("/v1/models", headers={"origin": "https://anyone.example"})
        assert response.status_code == 200 and response.headers["access-control-allow-origin"] == "*"


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                          "text/plain", "text/plain;charset=UTF-8", "application/jsonp"])
async def test_a_body_that_does_not_say_it_is_json_is_a_415(content_type):
    headers = {} if content_type is None else {"content-type": content_type}
    async with client_for(create_app(StandInTokenizerManager())) as client:
        for path in ("/v1/completions", "/abort_request", "/flush_cache"):
            response = await client.post(path, content=b'{"abort_all": true, "prompt": "x"}', headers=headers)
            assert_refused(response, 415, "Content-Type: application/json")


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON",
                                          "application/vnd.api+json"])
async def test_json_content_types_are_read(content_type):
    async with client_for(create_app(StandInTokenizerManager())) as client:
        response = await client.post("/v1/completions", content=b'{"prompt": "Say"}',
                                     headers={"content-type": content_type})
        assert response.status_code == 200, response.text


async def test_a_control_request_without_a_body_needs_no_content_type():
    manager = StandInTokenizerManager()
    async with client_for(create_app(manager)) as client:
        assert (await client.post("/pause_generation")).status_code == 200
