"""Errors as RFC 9457 ``application/problem+json`` with stable ``type`` URIs.

Every failure the API returns goes through here: handlers for request validation,
Starlette's HTTPException, our own ``ProblemError`` and, last, any unexpected exception
(logged, answered with a 500 problem that leaks nothing). Clients switch on ``type``;
``title`` and ``detail`` are for humans and may change.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "https://feed.example/problems/"

log = logging.getLogger("services.api.http.problems")


@dataclass(frozen=True)
class ProblemKind:
    """One stable kind of failure: its ``type`` slug, HTTP status and title."""

    slug: str
    status: int
    title: str

    @property
    def type_uri(self) -> str:
        return PROBLEM_TYPE_BASE + self.slug


BAD_REQUEST = ProblemKind("bad-request", 400, "Bad request")
IDEMPOTENCY_KEY_REQUIRED = ProblemKind("idempotency-key-required", 400,
                                       "An Idempotency-Key header is required")
UNAUTHENTICATED = ProblemKind("unauthenticated", 401, "Authentication required")
FORBIDDEN = ProblemKind("forbidden", 403, "Not allowed")
NOT_FOUND = ProblemKind("not-found", 404, "Not found")
METHOD_NOT_ALLOWED = ProblemKind("method-not-allowed", 405, "Method not allowed")
# A suspended account may read but not write; a deleted one may do nothing (docs/api.md).
ACCOUNT_SUSPENDED = ProblemKind("account-suspended", 403, "Account suspended")
ACCOUNT_DELETED = ProblemKind("account-deleted", 410, "Account deleted")
NOT_ACCEPTABLE = ProblemKind("not-acceptable", 406, "Not acceptable")
CONFLICT = ProblemKind("conflict", 409, "Conflict")
IDEMPOTENCY_IN_FLIGHT = ProblemKind("idempotency-key-in-flight", 409,
                                    "A request with this Idempotency-Key is still in progress")
BODY_TOO_LARGE = ProblemKind("body-too-large", 413, "Request body too large")
UNSUPPORTED_MEDIA_TYPE = ProblemKind("unsupported-media-type", 415, "Unsupported media type")
VALIDATION_FAILED = ProblemKind("validation-failed", 422, "Request is not valid")
IDEMPOTENCY_KEY_REUSED = ProblemKind("idempotency-key-reused", 422,
                                     "Idempotency-Key was already used with a different body")
INTERNAL = ProblemKind("internal", 500, "Internal error")
UNAVAILABLE = ProblemKind("unavailable", 503, "Service unavailable")

_BY_STATUS = {k.status: k for k in (BAD_REQUEST, UNAUTHENTICATED, FORBIDDEN, NOT_FOUND,
                                    METHOD_NOT_ALLOWED, NOT_ACCEPTABLE, CONFLICT,
                                    BODY_TOO_LARGE, UNSUPPORTED_MEDIA_TYPE, VALIDATION_FAILED,
                                    INTERNAL, UNAVAILABLE)}


class ProblemError(Exception):
    """Raise anywhere in a request to answer with this problem."""

    def __init__(self, kind: ProblemKind, detail: str = "", *,
                 headers: Mapping[str, str] | None = None, **extra: Any) -> None:
        super().__init__(detail or kind.title)
        self.kind = kind
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = extra


def problem_body(kind: ProblemKind, detail: str = "", instance: str | None = None,
                 **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"type": kind.type_uri, "title": kind.title, "status": kind.status}
    if detail:
        body["detail"] = detail
    if instance:
        body["instance"] = instance
    body.update(extra)
    return body


def problem_response(kind: ProblemKind, detail: str = "", *, request: Request | None = None,
                     headers: Mapping[str, str] | None = None, **extra: Any) -> JSONResponse:
    instance = request.url.path if request is not None else None
    if request is not None and getattr(request.state, "request_id", None):
        extra.setdefault("request_id", request.state.request_id)
    return JSONResponse(problem_body(kind, detail, instance, **extra), status_code=kind.status,
                        headers=dict(headers or {}), media_type=PROBLEM_MEDIA_TYPE)


def kind_for_status(status: int) -> ProblemKind:
    """The problem kind for a bare HTTP status (from Starlette routing, say)."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ProblemKind(f"http-{status}", status, "Error") if status < 500 else INTERNAL


def _is_missing_idempotency_key(error: Mapping[str, Any]) -> bool:
    loc = tuple(error.get("loc", ()))
    return (error.get("type") == "missing" and len(loc) == 2 and loc[0] == "header"
            and str(loc[1]).lower() in ("idempotency-key", "idempotency_key"))


def _public_error(error: Mapping[str, Any]) -> dict[str, Any]:
    """Location, message and type of one validation error; the input is never echoed."""
    return {"loc": [str(p) for p in error.get("loc", ())], "msg": str(error.get("msg", "")),
            "type": str(error.get("type", ""))}


def validation_problem(errors: Sequence[Mapping[str, Any]]) -> tuple[ProblemKind, dict[str, Any]]:
    """Map FastAPI validation errors to a problem kind and its extra members.

    A missing Idempotency-Key is a 400 (the issue's contract), everything else a 422.
    """
    if any(_is_missing_idempotency_key(e) for e in errors):
        return IDEMPOTENCY_KEY_REQUIRED, {}
    return VALIDATION_FAILED, {"errors": [_public_error(e) for e in errors]}


def allowed_methods(request: Request) -> list[str]:
    """Every method some route accepts for this path (Starlette names only the first)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


def install_problem_handlers(app: FastAPI) -> None:
    """Register the handlers so that every error leaves as problem+json."""

    @app.exception_handler(ProblemError)
    async def _problem(request: Request, exc: ProblemError) -> JSONResponse:
        return problem_response(exc.kind, exc.detail, request=request, headers=exc.headers,
                                **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        kind, extra = validation_problem(exc.errors())
        return problem_response(kind, request=request, **extra)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = kind_for_status(exc.status_code)
        detail = exc.detail if isinstance(exc.detail, str) and exc.detail != kind.title else ""
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request))
        return problem_response(kind, detail, request=request, headers=headers)

    @app.exception_handler(psycopg.errors.InsufficientPrivilege)
    async def _hidden_account(request: Request, exc: psycopg.errors.InsufficientPrivilege) -> JSONResponse:
        # Postgres refused a write of a suspended or deleted account (migration 0006:
        # the HINT is the account's state).
        if exc.diag.message_hint == "deleted":
            return problem_response(ACCOUNT_DELETED, "this account was deleted", request=request)
        if exc.diag.message_hint == "suspended":
            return problem_response(ACCOUNT_SUSPENDED, "this account is suspended: it may read, "
                                    "not write", request=request)
        log.error("insufficient privilege in Postgres: %s", exc, extra={"path": request.url.path})
        return problem_response(INTERNAL, request=request)

    @app.exception_handler(psycopg.OperationalError)
    async def _store_down(request: Request, exc: psycopg.OperationalError) -> JSONResponse:
        # The source of truth is unreachable or restarting: a retryable 503, not a bug.
        log.warning("postgres unavailable: %s", exc, extra={"path": request.url.path})
        return problem_response(UNAVAILABLE, "the database is unavailable; retry shortly",
                                request=request, headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return unexpected_response(request, exc)


def unexpected_response(request: Request, exc: BaseException) -> JSONResponse:
    """A bug's answer: logged with its traceback, a 500 problem that leaks nothing (the
    request id, which ``edge.Edge`` puts on every response, finds the log lines)."""
    log.error("unhandled error", exc_info=exc, extra={"path": request.url.path})
    return problem_response(INTERNAL, request=request)


PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
        "request_id": {"type": "string"},
    },
}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries documenting problem+json bodies for ``statuses``."""
    return {status: {"description": kind_for_status(status).title,
                     "content": {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_SCHEMA}}}
            for status in statuses}
