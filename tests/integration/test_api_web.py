"""The feed page's HTTP side: the page and its files, and the development-only token route."""
from __future__ import annotations

import secrets

import httpx
import pytest
from pydantic import SecretStr

from services.api.app import create_app
from services.shared.settings import Settings
from tests.support.api_server import RunningApi, new_user_id, serve_in_thread, stop_server

pytestmark = pytest.mark.integration


def test_the_page_and_its_files_are_served(api_server: RunningApi) -> None:
    with api_server.client() as client:
        page = client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<script src="/static/feed.js"' in page.text
        for path, kind in (("/static/feed.js", "javascript"), ("/static/feed.css", "text/css")):
            got = client.get(path)
            assert got.status_code == 200 and kind in got.headers["content-type"], path
        assert client.get("/static/missing.js").status_code == 404


def test_a_minted_development_token_works_and_bad_ids_are_refused(api_server: RunningApi) -> None:
    assert api_server.settings.dev_mode  # the test session runs in development mode
    user = new_user_id()
    with api_server.client() as client:
        minted = client.post("/dev/token", json={"user_id": str(user)})
        assert minted.status_code == 200 and minted.json()["user_id"] == str(user)
        for bad in ({"user_id": "0"}, {"user_id": "-5"}, {"user_id": "x"}, {}, {"user_id": "1", "roles": []}):
            refused = client.post("/dev/token", json=bad)
            assert refused.status_code == 422, bad
            assert refused.headers["content-type"].startswith("application/problem+json")
    token = minted.json()["token"]
    with httpx.Client(base_url=api_server.base_url, headers={"Authorization": f"Bearer {token}"}) as c:
        assert c.get("/v1/me/preferences").status_code == 200


def test_no_token_is_minted_outside_development_mode(settings: Settings) -> None:
    safe = {"dev_mode": False, "jwt_secret": SecretStr(secrets.token_urlsafe(48)),
            "cursor_keys": SecretStr(f"p1:{secrets.token_urlsafe(48)}")}
    app = create_app(settings.model_copy(update=safe))
    server, thread, base_url = serve_in_thread(app)
    try:
        refused = httpx.post(f"{base_url}/dev/token", json={"user_id": "42"})
        assert refused.status_code == 404
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert httpx.get(f"{base_url}/").status_code == 200  # the page still loads (paste a token)
    finally:
        stop_server(server, thread)
