"""Operations endpoints and request ids, over real HTTP."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_readyz_reports_postgres_and_lease_and_is_200_only_when_all_checks_pass(api_server) -> None:
    with api_server.client() as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        ready = http.get("/readyz")
    checks = ready.json()["checks"]
    assert checks["postgres"] == "ok" and checks["id_lease"] == "ok"
    # Other parts register their own checks; the answer is 200 exactly when all are ok.
    assert ready.status_code == (200 if set(checks.values()) == {"ok"} else 503)


def test_client_request_id_is_echoed_and_a_missing_one_is_generated(api_server) -> None:
    with api_server.client() as http:
        echoed = http.get("/healthz", headers={"X-Request-ID": "req-123.abc"})
        generated = http.get("/healthz")
        unsafe = http.get("/healthz", headers={"X-Request-ID": "x" * 500})
    assert echoed.headers["x-request-id"] == "req-123.abc"
    assert len(generated.headers["x-request-id"]) == 32
    assert unsafe.headers["x-request-id"] != "x" * 500


def test_unknown_route_is_a_problem_with_stable_type(api_server) -> None:
    with api_server.client() as http:
        response = http.get("/no/such/route")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "https://feed.example/problems/not-found"


def test_metrics_count_requests_by_route_template(api_server) -> None:
    with api_server.client() as http:
        http.get("/healthz")
        text = http.get("/metrics").text
    assert 'feed_api_requests_total{method="GET",route="/healthz",status="200"}' in text
    assert "feed_api_request_duration_seconds_bucket" in text


def test_access_log_is_json_with_the_request_id(api_server, caplog) -> None:
    import json
    import logging

    from services.api.http.logs import JsonLogFormatter
    from tests.support.waiting import wait_until

    caplog.set_level(logging.INFO, logger="services.api.access")
    with api_server.client() as http:
        http.get("/healthz", headers={"X-Request-ID": "trace-me-42"})

    def logged() -> list[logging.LogRecord]:
        return [r for r in caplog.records if getattr(r, "request_id", None) == "trace-me-42"]

    wait_until(lambda: bool(logged()), message="the access log line")
    line = json.loads(JsonLogFormatter().format(logged()[0]))
    assert line["request_id"] == "trace-me-42"
    assert line["route"] == "/healthz" and line["status"] == 200
