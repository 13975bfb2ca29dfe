"""The OpenAPI document beyond what each route declares: the error answers routes document
(:data:`ERRORS`, :data:`CONFLICTS`), the ``X-API-Key`` scheme and no 422 (:func:`document_api`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from jobagentctl.models import ErrorBody
from jobagentctl.routes import V1_PREFIX

__all__ = ["CONFLICTS", "ERRORS", "document_api"]

# The error answers of every /api/v1 route.
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "VALIDATION_ERROR: malformed id, query or body"},
    401: {"model": ErrorBody, "description": "UNAUTHORIZED: missing, invalid or revoked key"},
    404: {"model": ErrorBody, "description": "NOT_FOUND: unknown, or outside the key's scope"},
    413: {"model": ErrorBody, "description": "PAYLOAD_TOO_LARGE"},
}
# ... and of the routes that change a claim.
CONFLICTS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    409: {
        "model": ErrorBody,
        "description": "NOT_CLAIMABLE, CLAIM_LOST, CLAIM_MISMATCH or JOB_TERMINAL; "
        "details.jobStatus tells the job's status",
    },
}

_API_KEY_SCHEME = {
    "type": "apiKey",
    "in": "header",
    "name": "X-API-Key",
    "description": "<prefix>.<secret>; a workspace key or an agent key",
}


def document_api(app: FastAPI) -> None:
    """Serve ``app``'s document, changed in two ways:

    - the ``X-API-Key`` scheme is on every /api/v1 route. The key is checked by the edge, so no
      route declares it.
    - the framework's 422 answers are gone. Validation errors are 400 ``VALIDATION_ERROR``, declared
      per route: a generated client must not expect another shape.
    """

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _document(app: FastAPI) -> dict[str, Any]:
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})["ApiKey"] = _API_KEY_SCHEME
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            operation.get("responses", {}).pop("422", None)
            if path.startswith(V1_PREFIX):
                operation["security"] = [{"ApiKey": []}]
    schemas = components.get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    return schema
