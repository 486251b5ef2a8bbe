"""The auth matrix over real HTTP: every bad token is a 401 problem with a challenge."""
from __future__ import annotations

import base64
import json
import time

import jwt
import pytest

from services.shared.clients import pg
from tests.support.api_server import new_user_id

pytestmark = pytest.mark.integration

PROBLEM_BASE = "https://feed.example/problems/"


def _b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _bad_tokens(secret: str, user_id: int) -> dict[str, str | None]:
    now = int(time.time())
    return {
        "missing": None,
        "malformed_scheme": "Basic dXNlcjpwYXNz",
        "malformed_token": "Bearer not.a.jwt",
        "alg_none": "Bearer " + _b64({"alg": "none", "typ": "JWT"}) + "."
                    + _b64({"sub": str(user_id), "exp": now + 600}) + ".",
        "wrong_key": "Bearer " + jwt.encode({"sub": str(user_id), "exp": now + 600},
                                            "another-secret-0123456789abcdef-xyz", "HS256"),
        "expired": "Bearer " + jwt.encode({"sub": str(user_id), "exp": now - 3600}, secret,
                                          "HS256"),
        "missing_exp": "Bearer " + jwt.encode({"sub": str(user_id)}, secret, "HS256"),
        "missing_sub": "Bearer " + jwt.encode({"exp": now + 600}, secret, "HS256"),
        "non_numeric_sub": "Bearer " + jwt.encode({"sub": "alice", "exp": now + 600}, secret,
                                                  "HS256"),
        "hs512": "Bearer " + jwt.encode({"sub": str(user_id), "exp": now + 600}, secret,
                                        "HS512"),
    }


# The hs512 case signs with the 35-byte dev secret; PyJWT warns that is short for SHA-512.
@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
@pytest.mark.parametrize("case", ["missing", "malformed_scheme", "malformed_token", "alg_none",
                                  "wrong_key", "expired", "missing_exp", "missing_sub",
                                  "non_numeric_sub", "hs512"])
def test_bad_token_is_401_problem_with_www_authenticate(api_server, case: str) -> None:
    secret = api_server.settings.jwt_secret.get_secret_value()
    user_id = new_user_id()
    header = _bad_tokens(secret, user_id)[case]
    headers = {} if header is None else {"Authorization": header}
    with api_server.client() as http:
        response = http.post("/v1/posts", json={"text": "hi"},
                             headers={**headers, "Idempotency-Key": f"k-{case}"})
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"].startswith('Bearer realm="feed"')
    assert response.json()["type"] == PROBLEM_BASE + "unauthenticated"


def test_rejected_token_never_creates_the_user(api_server) -> None:
    user_id = new_user_id()
    wrong = jwt.encode({"sub": str(user_id), "exp": int(time.time()) + 600},
                       "another-secret-0123456789abcdef-xyz", "HS256")
    with api_server.client() as http:
        http.get("/v1/posts/1", headers={"Authorization": f"Bearer {wrong}"})
    with pg.connect(api_server.settings) as conn:
        assert conn.execute("SELECT 1 FROM users WHERE user_id = %s",
                            (user_id,)).fetchone() is None


def test_first_authenticated_request_creates_the_user(api_server) -> None:
    user_id = new_user_id()
    with api_server.client(user_id) as http:
        assert http.get("/v1/posts/1").status_code == 404
    with pg.connect(api_server.settings) as conn:
        assert conn.execute("SELECT 1 FROM users WHERE user_id = %s",
                            (user_id,)).fetchone() is not None


def test_moderation_needs_the_moderator_role(api_server) -> None:
    author = new_user_id()
    with api_server.client(author) as http:
        post = http.post("/v1/posts", json={"text": "x"}, headers={"Idempotency-Key": "m1"})
        assert post.status_code == 201
        post_id = post.json()["post_id"]
        forbidden = http.post(f"/internal/moderation/posts/{post_id}",
                              json={"action": "remove"})
    assert forbidden.status_code == 403
    assert forbidden.json()["type"] == PROBLEM_BASE + "forbidden"
    with api_server.client() as anonymous:
        assert anonymous.post(f"/internal/moderation/posts/{post_id}",
                              json={"action": "remove"}).status_code == 401
    with api_server.client(new_user_id(), moderator=True) as moderator:
        assert moderator.post(f"/internal/moderation/posts/{post_id}",
                              json={"action": "remove"}).status_code == 200
