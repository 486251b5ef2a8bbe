"""Gateway tokens (RS256, ES256) verified against a JWKS file; HS256 with the secret."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from pydantic import ValidationError
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from services.api.http.auth import MODERATOR_ROLE, TokenRejected, TokenVerifier, mint_token
from services.api.http.jwks import FileJwks, UrlJwks, jwks_keys, signing_keys
from services.shared.settings import ApiSettings

from tests.support.jwks import Signer

SECRET = "unit-test-secret-0123456789abcdef-0123"
ISSUER = "https://issuer.example/"
AUDIENCE = "feed-api"


def publish(path: Path, *signers: Signer) -> None:
    """Replace the JWKS file atomically (a new inode: seen even within one mtime tick)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"keys": [s.jwk for s in signers]}))
    os.replace(tmp, path)


@pytest.fixture(scope="module")
def rsa1() -> Signer:
    return Signer("rsa-1", "RS256", issuer=ISSUER, audience=AUDIENCE)


@pytest.fixture(scope="module")
def rsa2() -> Signer:
    return Signer("rsa-2", "RS256", issuer=ISSUER, audience=AUDIENCE)


@pytest.fixture(scope="module")
def ec1() -> Signer:
    return Signer("ec-1", "ES256", issuer=ISSUER, audience=AUDIENCE)


@pytest.fixture
def jwks_file(tmp_path: Path, rsa1: Signer, ec1: Signer) -> Path:
    path = tmp_path / "jwks.json"
    publish(path, rsa1, ec1)
    return path


def verifier(path: Path, **kwargs: Any) -> TokenVerifier:
    kwargs = {"issuer": ISSUER, "audience": AUDIENCE, "leeway_s": 30, **kwargs}
    return TokenVerifier(SECRET, FileJwks(path), **kwargs)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256_forged(key: bytes, claims: dict[str, Any], kid: str) -> str:
    """An HS256 token whose HMAC key is ``key`` (PyJWT refuses to sign with a PEM)."""
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = _b64(json.dumps(claims).encode())
    mac = hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(mac)}"


def test_rs256_and_es256_tokens_verify(jwks_file: Path, rsa1: Signer, ec1: Signer) -> None:
    v = verifier(jwks_file)
    assert v.verify(rsa1.token(7, roles=[MODERATOR_ROLE])).is_moderator
    assert v.verify(ec1.token(8)).user_id == 8
    assert v.check(ec1.token(9)).user_id == 9


def test_hs256_with_the_secret_is_still_accepted(jwks_file: Path) -> None:
    v = verifier(jwks_file, issuer="", audience="")
    assert v.verify(mint_token(5, SECRET)).user_id == 5
    with_claims = verifier(jwks_file)  # iss and aud apply to HS256 too
    with pytest.raises(TokenRejected, match="lacks the (iss|aud) claim"):
        with_claims.verify(mint_token(5, SECRET))
    assert with_claims.verify(mint_token(5, SECRET, issuer=ISSUER,
                                         audience=AUDIENCE)).user_id == 5


def test_rotation_new_kid_accepted_once_published_and_old_one_dropped(
        jwks_file: Path, rsa1: Signer, rsa2: Signer, ec1: Signer) -> None:
    v = verifier(jwks_file)
    old = rsa1.token(1)
    assert v.verify(old).user_id == 1
    new = rsa2.token(2)
    with pytest.raises(TokenRejected, match="not known"):
        v.verify(new)
    publish(jwks_file, rsa1, rsa2, ec1)
    assert v.verify(new).user_id == 2
    assert v.cached(old) is not None  # an unchanged key keeps remembered tokens valid
    publish(jwks_file, rsa2, ec1)  # rsa-1 retired, noticed by the next token verified
    assert v.verify(rsa2.token(3)).user_id == 3
    assert v.cached(old) is None
    with pytest.raises(TokenRejected, match="not known"):
        v.verify(old)


def test_unknown_kid_and_missing_kid_are_refused(jwks_file: Path, rsa1: Signer) -> None:
    v = verifier(jwks_file)
    with pytest.raises(TokenRejected, match="not known"):
        v.verify(rsa1.token(kid="nobody"))
    no_kid = jwt.encode({"sub": "1", "exp": int(time.time()) + 60}, rsa1.private, "RS256")
    with pytest.raises(TokenRejected, match="kid"):
        v.verify(no_kid)


# Times are offsets from the moment the test runs (NOW + n), not from collection: a long
# suite runs this minutes after it was collected.
NOW = object()


@pytest.mark.parametrize("claims,reason", [
    ({"aud": "someone-else"}, "audience"),
    ({"aud": None}, "aud claim"),
    ({"iss": "https://evil.example/"}, "issuer"),
    ({"iss": None}, "iss claim"),
    ({"exp": (NOW, -3600)}, "expired"),
    ({"exp": None}, "exp claim"),
    ({"nbf": (NOW, 600)}, "not valid yet"),
    ({"iat": (NOW, 600)}, "not valid yet"),
    ({"sub": "alice"}, "decimal"),
])
def test_bad_claims_are_refused(jwks_file: Path, ec1: Signer, claims: dict[str, Any],
                                reason: str) -> None:
    now = int(time.time())
    claims = {k: now + v[1] if isinstance(v, tuple) and v[0] is NOW else v
              for k, v in claims.items()}
    with pytest.raises(TokenRejected, match=reason):
        verifier(jwks_file).verify(ec1.token(**claims))


def test_leeway_is_honoured(jwks_file: Path, rsa1: Signer) -> None:
    now = int(time.time())
    late = rsa1.token(exp=now - 10)
    early = rsa1.token(nbf=now + 10, iat=now + 10)
    assert verifier(jwks_file, leeway_s=30).verify(late).user_id == 42
    assert verifier(jwks_file, leeway_s=30).verify(early).user_id == 42
    for token in (late, early):
        with pytest.raises(TokenRejected):
            verifier(jwks_file, leeway_s=0).verify(token)


def test_alg_none_is_refused(jwks_file: Path, rsa1: Signer) -> None:
    claims = {"sub": "1", "exp": int(time.time()) + 60, "iss": ISSUER, "aud": AUDIENCE}
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": rsa1.kid})
    with pytest.raises(TokenRejected, match="algorithm"):
        verifier(jwks_file).verify(unsigned)


def test_hs256_signed_with_the_public_key_is_refused(jwks_file: Path, rsa1: Signer,
                                                     ec1: Signer) -> None:
    claims = {"sub": "1", "exp": int(time.time()) + 60, "iss": ISSUER, "aud": AUDIENCE}
    v = verifier(jwks_file)
    for signer in (rsa1, ec1):
        for key in (signer.public_pem(), json.dumps(signer.jwk).encode()):
            with pytest.raises(TokenRejected, match="not valid"):
                v.verify(hs256_forged(key, claims, signer.kid))


def test_alg_must_match_the_key_and_other_algorithms_are_refused(
        jwks_file: Path, rsa1: Signer, ec1: Signer) -> None:
    v = verifier(jwks_file)
    with pytest.raises(TokenRejected):  # an EC signature under the RSA key's kid
        v.verify(ec1.token(kid=rsa1.kid))
    with pytest.raises(TokenRejected, match="algorithm"):
        v.verify(rsa1.token(alg="RS512"))
    with pytest.raises(TokenRejected, match="algorithm"):  # no JWKS: HS256 only
        TokenVerifier(SECRET).verify(rsa1.token())


def test_remembered_token_does_not_outlive_exp(jwks_file: Path, rsa1: Signer) -> None:
    now = [time.time()]
    v = verifier(jwks_file, leeway_s=30, clock=lambda: now[0])
    token = rsa1.token(ttl=60)
    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    assert v.verify(token).user_id == 42
    now[0] = exp + 29
    assert v.cached(token) is not None
    now[0] = exp + 30
    assert v.cached(token) is None


def test_verify_async_reads_the_file_in_a_thread(jwks_file: Path, rsa1: Signer,
                                                 rsa2: Signer, ec1: Signer) -> None:
    v = verifier(jwks_file)

    async def scenario() -> None:
        assert (await v.verify_async(rsa1.token(3))).user_id == 3
        with pytest.raises(TokenRejected, match="not known"):
            await v.verify_async(rsa2.token(4))
        publish(jwks_file, rsa1, rsa2, ec1)
        assert (await v.verify_async(rsa2.token(4))).user_id == 4

    asyncio.run(scenario())


def test_unreadable_file_keeps_the_known_keys(jwks_file: Path, rsa1: Signer,
                                              rsa2: Signer) -> None:
    v = verifier(jwks_file)
    assert v.verify(rsa1.token(1)).user_id == 1
    jwks_file.write_text("{not json")
    assert v.verify(rsa1.token(2)).user_id == 2
    jwks_file.unlink()
    assert v.verify(rsa1.token(3)).user_id == 3
    with pytest.raises(TokenRejected, match="not known"):
        v.verify(rsa2.token())


def test_signing_keys_skips_keys_that_cannot_sign_gateway_tokens(rsa1: Signer,
                                                                 ec1: Signer) -> None:
    secret_jwk = {"kty": "oct", "kid": "hmac", "k": _b64(b"x" * 32)}
    short = RSAAlgorithm.to_jwk(rsa.generate_private_key(public_exponent=65537, key_size=1024)
                                .public_key(), as_dict=True)
    keys = signing_keys({"keys": [
        rsa1.jwk, ec1.jwk, secret_jwk, {**rsa1.jwk, "kid": "enc", "use": "enc"},
        {**rsa1.jwk, "kid": "ps", "alg": "PS256"}, {**short, "kid": "short"},
        {k: v for k, v in rsa1.jwk.items() if k != "kid"}, "junk"]})
    assert set(keys) == {"rsa-1", "ec-1"}
    with pytest.raises(ValueError):
        signing_keys({"keys": [secret_jwk]})
    with pytest.raises(ValueError):
        signing_keys(["not", "a", "jwks"])


class FakeUrl(UrlJwks):
    """A JWKS URL whose fetches are counted and served from ``document``."""

    def __init__(self, document: dict[str, Any], now: list[float]) -> None:
        super().__init__("http://127.0.0.1:1/jwks", max_age_s=300, min_refresh_s=10,
                         timeout_s=1, clock=lambda: now[0])
        self.document: dict[str, Any] | None = document
        self.fetches = 0

    def _read(self) -> Any:
        self.fetches += 1
        if self.document is None:
            raise OSError("connection refused")
        return self.document


def test_url_keys_are_cached_and_unknown_kids_refetch_at_most_every_min_refresh(
        rsa1: Signer, rsa2: Signer) -> None:
    now = [1000.0]
    keys = FakeUrl({"keys": [rsa1.jwk]}, now)
    assert keys.key_for("rsa-1") is not None and keys.fetches == 1
    assert keys.key_for("rsa-2") is None and keys.fetches == 1  # within min_refresh_s
    keys.document = {"keys": [rsa1.jwk, rsa2.jwk]}
    now[0] += 10
    assert keys.key_for("rsa-2") is not None and keys.fetches == 2
    assert keys.key_for("rsa-1") is not None and keys.fetches == 2  # known: cached
    now[0] += 300
    keys.document = None  # the JWKS is down: known keys still verify
    assert keys.key_for("rsa-1") is not None and keys.fetches == 3
    assert keys.key_for("other") is None and keys.fetches == 3
    now[0] += 10
    assert keys.key_for("other") is None and keys.fetches == 4


def test_url_reload_when_stale_runs_in_the_background(rsa1: Signer, rsa2: Signer) -> None:
    now = [1000.0]
    keys = FakeUrl({"keys": [rsa1.jwk]}, now)
    v = TokenVerifier(SECRET, keys, issuer=ISSUER, audience=AUDIENCE)

    async def scenario() -> None:
        assert (await v.verify_async(rsa1.token(1))).user_id == 1
        now[0] += 300
        keys.document = {"keys": [rsa2.jwk]}  # rsa-1 retired
        # Stale: the reload starts in the background; the caller still gets an answer.
        await v.verify_async(rsa1.token(2))
        await asyncio.sleep(0.2)
        assert keys.fetches == 2 and keys.kids == {"rsa-2"}
        with pytest.raises(TokenRejected, match="not known"):
            await v.verify_async(rsa1.token(3))

    asyncio.run(scenario())


def test_settings_choose_the_key_source(tmp_path: Path) -> None:
    assert jwks_keys(ApiSettings(jwt_jwks_url="", jwt_jwks_file="")) is None
    assert isinstance(jwks_keys(ApiSettings(jwt_jwks_file=str(tmp_path / "k.json"))), FileJwks)
    url = jwks_keys(ApiSettings(jwt_jwks_url="https://issuer.example/.well-known/jwks.json",
                                jwt_jwks_cache_s=60, jwt_jwks_min_refresh_s=5))
    assert isinstance(url, UrlJwks) and url.max_age_s == 60 and url.min_refresh_s == 5
    # A URL that is not http(s), or both sources at once, is refused with the settings.
    with pytest.raises(ValidationError, match="FEED_JWT_JWKS_URL must be an http"):
        ApiSettings(jwt_jwks_url="file:///etc/passwd")
    with pytest.raises(ValidationError, match="not both"):
        ApiSettings(jwt_jwks_url="https://issuer.example/jwks", jwt_jwks_file=str(tmp_path / "k.json"))
