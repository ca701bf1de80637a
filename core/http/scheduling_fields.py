"""Request fields the scheduling policies use: ``priority`` and the tenant.

The tenant is OpenAI's ``user`` field when sent, else the ``X-Tenant`` header,
so a gateway can label traffic without touching request bodies.
"""

from __future__ import annotations

import dataclasses

from starlette.requests import Request

from tercet.errors import RequestError
from tercet.field_checks import IntRange, check_text
from tercet.frontend.io_struct import GenerateRequest
from tercet.sampling_params import INT32_MAX

TENANT_HEADER = "x-tenant"
MAX_TENANT_LENGTH = 256
PRIORITY = IntRange(-INT32_MAX, INT32_MAX)


def with_scheduling_fields(generate_request: GenerateRequest, body: dict, request: Request) -> GenerateRequest:
    priority = body.get("priority", 0)
    if priority is None:
        priority = 0
    PRIORITY.check(priority, "priority")
    tenant = body.get("user")
    if tenant is None:
        tenant = request.headers.get(TENANT_HEADER)  # latin-1 decoded: always encodable
    if tenant is not None:
        if not isinstance(tenant, str) or len(tenant) > MAX_TENANT_LENGTH:
            raise RequestError(f"user must be a string of at most {MAX_TENANT_LENGTH} characters", "user")
        check_text(tenant, "user")
    return dataclasses.replace(generate_request, priority=priority, tenant=tenant or None)
