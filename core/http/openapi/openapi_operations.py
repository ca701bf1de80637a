"""The parts of an OpenAPI operation every route's description is made of: bodies, responses, errors.

Built-in and plugin routes alike describe their paths with these (a plugin may
also write its path item by hand); :mod:`tercet.http.openapi.openapi_document` puts the path
items of the routes served into ``GET /openapi.json``.
"""

from __future__ import annotations

from tercet.http.openapi.openapi_schemas import ERROR_REF

ERROR_DESCRIPTIONS = {
    "400": "invalid body or field, or a feature tercet lacks",
    "401": "missing or wrong API key",
    "403": "another site's page (Origin), or a name that is not the server's (Host): server.allowed_origins, "
           "server.allowed_hosts",
    "404": "unknown model",
    "409": "conflicts with the server's state",
    "413": "the request body is over server.max_request_body_bytes",
    "415": "a body not sent as Content-Type: application/json",
    "429": "the server is at capacity",
    "500": "an unexpected failure",
    "503": "the server cannot serve now",
}
GENERATION_ERRORS = ("400", "401", "404", "413", "429", "500", "503")


def json_content(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def responses(ok: dict, *errors: str, error_schema: dict = ERROR_REF) -> dict:
    answers = {"200": ok}
    for status in ("403", *errors):  # any route refuses other sites' pages (tercet.http.server.browser_guard)
        answers[status] = json_content(error_schema, ERROR_DESCRIPTIONS[status])
    return answers


def generation_ok(description: str) -> dict:
    return {
        "description": description,
        "content": {
            "application/json": {"schema": {"type": "object"}},
            "text/event-stream": {"schema": {"type": "string"}},  # with stream: true
        },
    }


def request_body(schema: dict, required: bool = True) -> dict:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def operation(operation_id: str, summary: str, answers: dict, body: dict | None = None,
              error_schema: dict = ERROR_REF) -> dict:
    described = {"operationId": operation_id, "summary": summary, "responses": answers}
    if body is not None:
        described["requestBody"] = body
        answers["415"] = json_content(error_schema, ERROR_DESCRIPTIONS["415"])
    return described


def generation_operation(operation_id: str, summary: str, request_schema: str, what: str,
                         error_schema: dict = ERROR_REF) -> dict:
    """A POST that generates: its body a named schema, its answer JSON or a stream."""
    return {"post": operation(
        operation_id, summary, responses(generation_ok(what), *GENERATION_ERRORS, error_schema=error_schema),
        request_body({"$ref": f"#/components/schemas/{request_schema}"}), error_schema,
    )}
