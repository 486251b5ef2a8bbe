"""The access log: a line per request only on demand, 5xx always; request ids echoed."""
from __future__ import annotations

import asyncio
import logging

import pytest
from starlette.types import Message, Receive, Scope, Send

from services.api.http.edge import Edge
from services.api.http.logs import ACCESS_LOGGER, configure_logging
from services.api.http.metrics import ApiMetrics


def _answering(status: int):
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})
    return app


def _serve(status: int, request_id: str | None = None) -> list[Message]:
    headers = [(b"x-request-id", request_id.encode())] if request_id else []
    scope: Scope = {"type": "http", "method": "GET", "path": "/healthz", "headers": headers}
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(Edge(_answering(status), ApiMetrics(), 1024)(scope, receive, send))
    return sent


def _configure(caplog: pytest.LogCaptureFixture, *, access_log: bool = False) -> None:
    """The process's logging set-up, with pytest's capture handler put back on the root."""
    configure_logging(access_log=access_log)
    logging.getLogger().addHandler(caplog.handler)


def _access_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == ACCESS_LOGGER]


@pytest.fixture
def access_logger_restored():
    logger = logging.getLogger(ACCESS_LOGGER)
    level = logger.level
    root_handlers, root_level = logging.getLogger().handlers[:], logging.getLogger().level
    yield logger
    logger.setLevel(level)
    logging.getLogger().handlers[:] = root_handlers
    logging.getLogger().setLevel(root_level)


def test_successful_requests_are_not_logged_by_default(caplog, access_logger_restored) -> None:
    _configure(caplog)  # the root passes INFO; the access logger does not
    _serve(200, "quiet-1")
    assert _access_lines(caplog) == []


def test_server_errors_are_always_logged_with_their_request_id(caplog,
                                                               access_logger_restored) -> None:
    _configure(caplog)
    _serve(503, "broken-7")
    [line] = _access_lines(caplog)
    assert line.levelno == logging.ERROR
    assert line.request_id == "broken-7" and line.status == 503


def test_every_request_is_logged_when_the_access_log_is_asked_for(caplog,
                                                                  access_logger_restored) -> None:
    _configure(caplog, access_log=True)
    _serve(200, "trace-me-42")
    _serve(404)
    lines = _access_lines(caplog)
    assert [(r.levelno, r.status) for r in lines] == [(logging.INFO, 200), (logging.INFO, 404)]
    assert lines[0].request_id == "trace-me-42"
    assert len(lines[1].request_id) == 32


def test_the_request_id_is_echoed_whether_or_not_the_line_is_written(access_logger_restored) -> None:
    configure_logging()
    start = _serve(200, "req-123.abc")[0]
    assert (b"x-request-id", b"req-123.abc") in start["headers"]


def test_a_client_id_sent_twice_is_echoed_once_and_a_bad_one_replaced(access_logger_restored) -> None:
    configure_logging()
    start = _serve(200, "spaces are not allowed")[0]
    [echoed] = [v for k, v in start["headers"] if k == b"x-request-id"]
    assert len(echoed) == 32 and b" " not in echoed


def test_a_declared_body_over_the_limit_is_refused_before_the_app_runs() -> None:
    scope: Scope = {"type": "http", "method": "POST", "path": "/v1/posts",
                    "headers": [(b"content-length", b"4096")]}
    sent: list[Message] = []
    ran: list[bool] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        ran.append(True)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(Edge(app, ApiMetrics(), 1024)(scope, receive, send))
    assert not ran and sent[0]["status"] == 413
    assert (b"content-type", b"application/problem+json") in sent[0]["headers"]
    assert any(k == b"x-request-id" for k, _ in sent[0]["headers"])
