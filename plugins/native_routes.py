"""SGLang's native generation API as an HTTP route: ``POST /generate``.

The handler is tercet's own (``tercet.http.native.native_api``), named by reference so that
nothing of it is imported until the API server builds its app.
"""

from tercet.plugin_api import hookimpl


@hookimpl
def register_http_routes(register):
    register("/generate", "tercet.http.native.native_api:generate", ["POST"],
             openapi="tercet.http.openapi.openapi_paths:GENERATE", generates=True)
