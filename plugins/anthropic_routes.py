"""The Anthropic Messages API as HTTP routes: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

The handlers are tercet's own (``tercet.http.anthropic.anthropic_api``, served over chat completions),
named by reference so that nothing of them is imported until the API server builds its app;
their errors are in Anthropic's shape.
"""

from tercet.plugin_api import hookimpl

HANDLERS = "tercet.http.anthropic.anthropic_api"
PATHS = "tercet.http.openapi.openapi_anthropic"
ERRORS = "tercet.http.anthropic.anthropic_response:anthropic_error_body"


@hookimpl
def register_http_routes(register):
    register("/v1/messages", f"{HANDLERS}:create_message", ["POST"], openapi=f"{PATHS}:MESSAGES", generates=True,
             error_body=ERRORS)
    register("/v1/messages/count_tokens", f"{HANDLERS}:count_tokens", ["POST"], openapi=f"{PATHS}:COUNT_TOKENS",
             generates=True, error_body=ERRORS)
