"""Gateway tokens over real HTTP: the API fetches its JWKS from a local HTTP server.

The tests run in file order on one API and one JWKS server: rotation publishes a second
key, and the last test stops the JWKS server.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from services.shared.settings import Settings
from tests.support.api_server import RunningApi, new_user_id, running_api
from tests.support.jwks import Signer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

PROBLEM_BASE = "https://feed.example/problems/"
ISSUER = "https://gateway.test/"
AUDIENCE = "feed-api"
CACHE_S = 2.0
MIN_REFRESH_S = 0.5


class JwksServer:
    """A JWKS document served on a free loopback port; ``document`` may be swapped."""

    def __init__(self, *signers: Signer) -> None:
        self.document: dict[str, Any] = {"keys": [s.jwk for s in signers]}
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                owner.requests += 1
                body = json.dumps(owner.document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/.well-known/jwks.json"
        self._thread = threading.Thread(target=self._server.serve_forever, name="jwks",
                                        daemon=True)
        self._thread.start()

    def publish(self, *signers: Signer) -> None:
        self.document = {"keys": [s.jwk for s in signers]}

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)


@pytest.fixture(scope="module")
def signers() -> dict[str, Signer]:
    return {name: Signer(name, alg, issuer=ISSUER, audience=AUDIENCE) for name, alg in
            (("rsa-1", "RS256"), ("rsa-2", "RS256"), ("ec-1", "ES256"), ("rogue", "RS256"))}


@pytest.fixture(scope="module")
def jwks(signers: dict[str, Signer]) -> Iterator[JwksServer]:
    server = JwksServer(signers["rsa-1"], signers["ec-1"])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway_api(settings: Settings, jwks: JwksServer) -> Iterator[RunningApi]:
    gateway = settings.model_copy(update={
        "jwt_jwks_url": jwks.url, "jwt_issuer": ISSUER, "jwt_audience": AUDIENCE,
        "jwt_jwks_cache_s": CACHE_S, "jwt_jwks_min_refresh_s": MIN_REFRESH_S,
        "jwt_jwks_timeout_s": 1.0})
    with running_api(gateway) as api:
        yield api


def feed(api: RunningApi, token: str) -> httpx.Response:
    with httpx.Client(base_url=api.base_url, timeout=30) as http:
        return http.get("/v1/feed", headers={"Authorization": f"Bearer {token}"})


def assert_refused(response: httpx.Response, reason: str) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/problem+json"
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer realm="feed"') and 'error="invalid_token"' in challenge
    body = response.json()
    assert body["type"] == PROBLEM_BASE + "unauthenticated"
    assert reason in body["detail"]


def test_rs256_and_es256_tokens_are_accepted(gateway_api: RunningApi,
                                             signers: dict[str, Signer]) -> None:
    for name in ("rsa-1", "ec-1"):
        token = signers[name].token(new_user_id())
        first = feed(gateway_api, token)
        assert first.status_code == 200, first.text
        again = feed(gateway_api, token)  # the remembered token: the fast path
        assert again.status_code == 200 and again.json()["items"] == first.json()["items"]


def test_hs256_dev_token_still_accepted(gateway_api: RunningApi) -> None:
    from services.api.http.auth import mint_token

    token = mint_token(new_user_id(), gateway_api.settings.jwt_secret.get_secret_value(),
                       issuer=ISSUER, audience=AUDIENCE)
    assert feed(gateway_api, token).status_code == 200


def test_rotation_accepts_a_new_kid_without_a_restart(gateway_api: RunningApi, jwks: JwksServer,
                                                      signers: dict[str, Signer]) -> None:
    token = signers["rsa-2"].token(new_user_id())
    assert_refused(feed(gateway_api, token), "signing key is not known")
    jwks.publish(signers["rsa-1"], signers["rsa-2"], signers["ec-1"])
    # An unknown kid refetches at most every MIN_REFRESH_S: accepted within a few of those.
    wait_until(lambda: feed(gateway_api, token).status_code == 200, timeout=10,
               interval=MIN_REFRESH_S / 2, message="the rotated key to be fetched")
    assert feed(gateway_api, signers["rsa-1"].token(new_user_id())).status_code == 200


@pytest.mark.parametrize("case,reason", [
    ("unknown_kid", "signing key is not known"),
    ("wrong_aud", "audience"),
    ("wrong_iss", "issuer"),
    ("expired", "expired"),
    ("not_yet_valid", "not valid yet"),
])
def test_bad_gateway_token_is_401_problem(gateway_api: RunningApi, signers: dict[str, Signer],
                                          case: str, reason: str) -> None:
    user = new_user_id()
    now = int(time.time())
    token = {
        "unknown_kid": lambda: signers["rogue"].token(user),
        "wrong_aud": lambda: signers["rsa-1"].token(user, aud="another-api"),
        "wrong_iss": lambda: signers["ec-1"].token(user, iss="https://evil.test/"),
        "expired": lambda: signers["rsa-1"].token(user, exp=now - 3600),
        "not_yet_valid": lambda: signers["ec-1"].token(user, nbf=now + 3600),
    }[case]()
    assert_refused(feed(gateway_api, token), reason)


def test_jwks_server_down_known_kids_verify_unknown_refused(
        gateway_api: RunningApi, jwks: JwksServer, signers: dict[str, Signer]) -> None:
    jwks.stop()
    time.sleep(CACHE_S + MIN_REFRESH_S)  # the keys are now due for a refetch, which fails
    for name in ("rsa-1", "rsa-2", "ec-1"):
        response = feed(gateway_api, signers[name].token(new_user_id()))
        assert response.status_code == 200, response.text
    time.sleep(MIN_REFRESH_S)
    assert_refused(feed(gateway_api, signers["rogue"].token(new_user_id())),
                   "signing key is not known")
    # Still known after the failed refetches.
    assert feed(gateway_api, signers["ec-1"].token(new_user_id())).status_code == 200
    assert jwks.requests < 20  # fetched on rotation and expiry, not per request
