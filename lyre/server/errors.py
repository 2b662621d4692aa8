"""OpenAI-shaped error responses: every bad request is a 4xx that names the problem."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from lyre.server.admission import Overloaded
from lyre.tts import VoiceNameTaken

__all__ = ["InvalidParam", "document_errors", "error_doc", "error_response", "install_error_handlers"]


class InvalidParam(ValueError):
    """A 400 whose error names the request field at fault (OpenAI's ``param``)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def error_response(status: int, message: str, kind: str, param: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": None}}
    return JSONResponse(body, status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    problems = []
    param = None
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        where = ".".join(loc) or "body"
        param = param or where
        problems.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(problems) or "invalid request", param


def install_error_handlers(app: FastAPI) -> None:
    def count(request: Request, kind: str) -> None:
        state = getattr(request.app.state, "lyre", None)
        if state is not None:
            state.metrics.errors.labels(kind).inc()

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        count(request, "invalid_request")
        message, param = _validation_message(exc)
        return error_response(400, message, "invalid_request_error", param)

    @app.exception_handler(ValueError)
    async def _bad_value(request: Request, exc: ValueError) -> JSONResponse:
        count(request, "invalid_request")
        return error_response(400, str(exc), "invalid_request_error", getattr(exc, "param", None))

    @app.exception_handler(VoiceNameTaken)
    async def _name_taken(request: Request, exc: VoiceNameTaken) -> JSONResponse:
        count(request, "name_taken")
        return error_response(409, str(exc), "invalid_request_error", exc.param)

    @app.exception_handler(Overloaded)
    async def _overloaded(request: Request, exc: Overloaded) -> JSONResponse:
        count(request, "overloaded")
        return error_response(429, str(exc), "rate_limit_error", headers={"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        count(request, f"http_{exc.status_code}")
        return error_response(exc.status_code, str(exc.detail), "invalid_request_error", headers=exc.headers)


_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
def error_doc(description: str) -> dict[str, object]:
    """An OpenAPI response with an OpenAI error body, for a route's own errors (404, 413, ...)."""
    return {"description": description, "content": {"application/json": {"schema": _ERROR_SCHEMA}}}


_DOCUMENTED = {"400": "Bad request: the message names the problem", "401": "Missing or wrong API key",
               "429": "At capacity: retry after Retry-After seconds"}


def document_errors(app: FastAPI) -> None:
    """Describe the errors the API really returns (400, 401, 429 with an OpenAI
    error body) instead of FastAPI's default 422."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                responses = operation.setdefault("responses", {})
                responses.pop("422", None)
                for code, description in _DOCUMENTED.items():
                    responses[code] = error_doc(description)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
