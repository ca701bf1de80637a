"""The OpenAI Responses API as an HTTP route: ``POST /v1/responses``, without server-side storage.

The handler is tercet's own (``tercet.http.responses.responses_api``, served over chat completions),
named by reference so that nothing of it is imported until the API server builds its app.
"""

from tercet.plugin_api import hookimpl


@hookimpl
def register_http_routes(register):
    register("/v1/responses", "tercet.http.responses.responses_api:create_response", ["POST"],
             openapi="tercet.http.openapi.openapi_responses:RESPONSES", generates=True)
