"""Token verification as a pure function: algorithm, signature and claims."""
from __future__ import annotations

import time

import jwt
import pytest

from services.api.http.auth import (LEEWAY_SECONDS, MODERATOR_ROLE, TokenRejected, VerifiedTokens,
                                    mint_token, parse_user_id, verify_token)

SECRET = "unit-test-secret-0123456789abcdef-0123"


def test_minted_token_verifies_with_user_and_roles() -> None:
    principal = verify_token(mint_token(42, SECRET, roles=(MODERATOR_ROLE,)), SECRET)
    assert principal.user_id == 42 and principal.is_moderator


def test_plain_user_is_not_moderator() -> None:
    assert not verify_token(mint_token(42, SECRET), SECRET).is_moderator


@pytest.mark.parametrize("claims,reason", [
    ({"sub": "1"}, "exp"),
    ({"exp": 4_000_000_000}, "sub"),
    ({"sub": "1", "exp": 1_000}, "expired"),
    ({"sub": "x1", "exp": 4_000_000_000}, "decimal"),
    ({"sub": "0", "exp": 4_000_000_000}, "range"),
    ({"sub": str(2 ** 63), "exp": 4_000_000_000}, "range"),
    ({"sub": "1", "exp": 4_000_000_000, "roles": "moderator"}, "roles"),
])
def test_bad_claims_are_rejected(claims: dict, reason: str) -> None:
    with pytest.raises(TokenRejected, match=reason):
        verify_token(jwt.encode(claims, SECRET, algorithm="HS256"), SECRET)


def test_alg_none_and_other_algorithms_and_keys_are_rejected() -> None:
    claims = {"sub": "1", "exp": int(time.time()) + 60}
    unsigned = jwt.encode(claims, None, algorithm="none")
    with pytest.raises(TokenRejected):
        verify_token(unsigned, SECRET)
    with pytest.raises(TokenRejected):
        verify_token(jwt.encode(claims, SECRET + "x" * 40, algorithm="HS512"), SECRET)
    with pytest.raises(TokenRejected):
        verify_token(jwt.encode(claims, "another-secret-0123456789abcdef-xyz",
                                algorithm="HS256"), SECRET)
    with pytest.raises(TokenRejected):
        verify_token("garbage", SECRET)


def test_parse_user_id_accepts_only_positive_int64_decimals() -> None:
    assert parse_user_id("9223372036854775807") == 2 ** 63 - 1
    for bad in ("", "-1", "+1", "1.0", " 1", "١٢", 7):
        with pytest.raises(TokenRejected):
            parse_user_id(bad)


def test_verified_tokens_are_remembered_until_they_expire() -> None:
    tokens = VerifiedTokens(capacity=2)
    # exp is LEEWAY_SECONDS - 1 s in the past: accepted for one more second.
    token = mint_token(7, SECRET, ttl_seconds=-(LEEWAY_SECONDS - 1))
    assert tokens.verify(token, SECRET).user_id == 7
    assert tokens.verify(token, SECRET).user_id == 7  # from memory
    with pytest.raises(TokenRejected):
        tokens.verify(token, "another-secret-of-at-least-32-bytes!!")  # the key holds the secret
    forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    with pytest.raises(TokenRejected):
        tokens.verify(forged, SECRET)
    time.sleep(1.2)
    with pytest.raises(TokenRejected):
        tokens.verify(token, SECRET)  # expired: remembered tokens too
