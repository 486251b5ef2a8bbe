"""The read benchmark's pull baseline answers, both query shapes, through its fast path
and its FastAPI route alike (a baseline that fails is no baseline: make bench-read
stopped on exactly that)."""
from __future__ import annotations

import httpx
import pytest

from bench.read.pull_service import create_app
from services.api.http.auth import mint_token
from services.shared.settings import Settings
from tests.support.api_server import new_user_id, serve_in_thread, stop_server

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("shape", ["lateral", "join"])
def test_pull_service_serves_pages_by_either_path(settings: Settings, shape: str) -> None:
    server, thread, base_url = serve_in_thread(create_app(settings, shape))
    token = mint_token(new_user_id(), settings.jwt_secret.get_secret_value())
    try:
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}) as c:
            for params in ({"limit": 5}, {"limit": 5, "order": "latest"}, {"limit": "5", "x": "1"}):
                page = c.get("/v1/feed", params=params)
                assert page.status_code == 200, (params, page.text)
                assert page.json()["items"] == [] and page.json()["next_cursor"] is None
            assert c.get("/v1/feed", params={"limit": 0}).status_code == 422  # the route's answer
    finally:
        stop_server(server, thread)
