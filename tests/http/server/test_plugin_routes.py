"""A plugin's route is served as the built-in ones are: key, error shape, containment, the document."""

import pytest
from http_stand_in import StandInTokenizerManager, client_for, with_routes
from starlette.responses import JSONResponse

from tercet.errors import ConfigError, RequestError
from tercet.http.server.app import create_app
from tercet.http.server.plugin_routes import installed_route_registrations
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager

pytestmark = pytest.mark.anyio
PATH_ITEM = {"get": {"operationId": "echoModel", "summary": "The model", "responses": {"200": {"description": "ok"}}}}


async def echo_model(request, tokenizer_manager):
    if request.query_params.get("fail") == "bad":
        raise RequestError("bad idea", "fail")
    if request.query_params.get("fail") == "crash":
        raise KeyError("a plugin's own bug")
    return JSONResponse({"model": tokenizer_manager.served_model_name})


def shaped_error(message, status, param, code):
    return {"type": "error", "error": {"kind": status, "message": message}}


def app_with_echo(manager=None, **options):
    routes = with_routes(("/echo", echo_model, ["GET"], {"openapi": PATH_ITEM, "error_body": shaped_error}))
    return create_app(manager or StandInTokenizerManager(), routes=routes, **options)


async def test_a_plugin_route_needs_the_api_key():
    async with client_for(app_with_echo(api_key="k")) as client:
        assert (await client.get("/echo")).status_code == 401
        response = await client.get("/echo", headers={"Authorization": "Bearer k"})
    assert response.json() == {"model": "stand-in-model"}


async def test_its_errors_take_its_shape_and_a_crash_is_counted_against_its_plugin():
    manager = StandInTokenizerManager()
    async with client_for(app_with_echo(manager)) as client:
        refused = await client.get("/echo", params={"fail": "bad"})
        crashed = await client.get("/echo", params={"fail": "crash"})
    assert (refused.status_code, refused.json()) == (400, {"type": "error", "error": {"kind": 400, "message": "bad idea"}})
    assert crashed.status_code == 500 and "a plugin's own bug" not in crashed.text
    assert crashed.json()["type"] == "error"
    assert manager.failures.as_dict()["by_plugin"] == {"test_plugin": 1}


async def test_once_a_child_died_it_answers_503_in_its_shape():
    async with client_for(app_with_echo(StandInTokenizerManager(healthy=False))) as client:
        response = await client.get("/echo")
    assert response.status_code == 503 and response.json()["error"]["kind"] == 503


async def test_openapi_json_lists_only_what_is_served():
    without_native = PluginRegistries.from_plugin_manager(create_plugin_manager(disabled=["native_routes"]))
    routes = [*without_native.http_routes.entries.values(), *with_routes(("/echo", echo_model, ["GET"],
                                                                          {"openapi": PATH_ITEM}))[-1:]]
    async with client_for(create_app(StandInTokenizerManager(), routes=routes)) as client:
        document = (await client.get("/openapi.json")).json()
        assert (await client.post("/generate", json={"text": "x"})).status_code == 404
    assert "/generate" not in document["paths"] and "GenerateRequest" not in document["components"]["schemas"]
    assert document["paths"]["/echo"] == PATH_ITEM and "/v1/chat/completions" in document["paths"]


def test_a_plugin_claiming_a_path_tercet_serves_itself_is_an_error():
    async def mine(request, tokenizer_manager):
        return JSONResponse({})

    with pytest.raises(ConfigError, match="'/metrics' is served by tercet itself; plugin 'test_plugin' cannot"):
        create_app(StandInTokenizerManager(), routes=with_routes(("/metrics", mine, ["GET"])))
    assert "/metrics" not in {registration.name for registration in installed_route_registrations()}
