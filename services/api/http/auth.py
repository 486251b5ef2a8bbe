"""Bearer-token authentication (DESIGN.md): HS256 JWTs with ``sub`` and ``exp`` required.

The algorithm is fixed to HS256, so ``alg: none`` and RS/HS key confusion are refused by
construction. ``sub`` is the user id as a decimal string of a positive 64-bit integer.
Moderation needs ``roles`` to contain ``moderator``.

Route code depends on ``CurrentUser`` or ``Moderator``; the user row is created on the
first authenticated request (``KnownUsers``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, Any

import jwt
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .problems import FORBIDDEN, UNAUTHENTICATED, ProblemError

ALGORITHM = "HS256"
MODERATOR_ROLE = "moderator"
MAX_USER_ID = (1 << 63) - 1
# Small tolerance for clock differences between the token issuer and this host.
LEEWAY_SECONDS = 5


@dataclass(frozen=True)
class Principal:
    """The authenticated caller."""

    user_id: int
    roles: frozenset[str]

    @property
    def is_moderator(self) -> bool:
        return MODERATOR_ROLE in self.roles


class TokenRejected(ValueError):
    """The token is not acceptable; ``str(exc)`` says why (safe to return to the client)."""


def parse_user_id(sub: Any) -> int:
    """``sub`` as a user id: a decimal string of an integer in 1..2**63-1."""
    if not isinstance(sub, str) or not sub.isascii() or not sub.isdigit() or len(sub) > 19:
        raise TokenRejected("sub must be a decimal user id")
    user_id = int(sub)
    if not 1 <= user_id <= MAX_USER_ID:
        raise TokenRejected("sub is out of range")
    return user_id


def verify_token(token: str, secret: str) -> Principal:
    """Check signature, algorithm and claims; return who the token speaks for."""
    return _verified(token, secret)[0]


def _verified(token: str, secret: str) -> tuple[Principal, Any]:
    """``verify_token``, and the token's ``exp`` claim."""
    try:
        claims = jwt.decode(token, secret, algorithms=[ALGORITHM], leeway=LEEWAY_SECONDS,
                            options={"require": ["exp", "sub"], "verify_sub": False})
    except jwt.ExpiredSignatureError as exc:
        raise TokenRejected("token expired") from exc
    except jwt.MissingRequiredClaimError as exc:
        raise TokenRejected(f"token lacks the {exc.claim} claim") from exc
    except jwt.InvalidTokenError as exc:
        raise TokenRejected("token is not valid") from exc
    roles = claims.get("roles", [])
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise TokenRejected("roles must be a list of strings")
    return Principal(user_id=parse_user_id(claims["sub"]), roles=frozenset(roles)), claims["exp"]


class VerifiedTokens:
    """Tokens that passed ``verify_token``, until they expire: a client sends the same
    token with every request, and HS256 verification plus two JSON decodes was ~4 % of
    a warm feed page's CPU (py-spy, read grid). Only a verified token's exact string is
    a key, so nothing unverified is ever accepted; ``exp`` is still enforced (with the
    same leeway) on every use. Bounded LRU-ish: cleared when full."""

    def __init__(self, capacity: int = 10_000, clock: Any = time.time) -> None:
        self._capacity = capacity
        self._clock = clock
        self._items: dict[tuple[str, str], tuple[Principal, float]] = {}

    def cached(self, token: str, secret: str) -> Principal | None:
        """The principal of a token verified before and not expired; None otherwise
        (the caller then verifies it, and learns why it is refused if it is)."""
        key = (token, secret)
        hit = self._items.get(key)
        if hit is not None:
            if self._clock() < hit[1] + LEEWAY_SECONDS:
                return hit[0]
            del self._items[key]
        return None

    def verify(self, token: str, secret: str) -> Principal:
        hit = self.cached(token, secret)
        if hit is not None:
            return hit
        principal, exp = _verified(token, secret)
        key = (token, secret)
        if isinstance(exp, (int, float)):
            if len(self._items) >= self._capacity:
                self._items.clear()
            self._items[key] = (principal, float(exp))
        return principal


_VERIFIED = VerifiedTokens()


def known_principal(token: str, secret: str) -> Principal | None:
    """The caller of a token this process has verified and that has not expired yet."""
    return _VERIFIED.cached(token, secret)


def mint_token(user_id: int, secret: str, *, roles: tuple[str, ...] = (),
               ttl_seconds: int = 3600, now: float | None = None) -> str:
    """A signed token for ``user_id`` (development and tests)."""
    issued = int(time.time() if now is None else now)
    claims: dict[str, Any] = {"sub": str(user_id), "iat": issued, "exp": issued + ttl_seconds}
    if roles:
        claims["roles"] = list(roles)
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def _challenge(error: str | None = None, description: str | None = None) -> dict[str, str]:
    value = 'Bearer realm="feed"'
    if error:
        value += f', error="{error}"'
    if description:
        value += f', error_description="{description}"'
    return {"WWW-Authenticate": value}


# Documents the scheme in OpenAPI; errors are ours (problem+json with a challenge).
bearer_scheme = HTTPBearer(auto_error=False, description="HS256 JWT with sub and exp")


async def current_user(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> Principal:
    """Authenticate the request and make sure the user exists in Postgres."""
    if credentials is None:
        header = request.headers.get("authorization")
        if header is None:
            raise ProblemError(UNAUTHENTICATED, "missing bearer token", headers=_challenge())
        raise ProblemError(UNAUTHENTICATED, "malformed Authorization header",
                           headers=_challenge("invalid_request", "expected Bearer <token>"))
    secret = request.app.state.settings.jwt_secret.get_secret_value()
    try:
        principal = _VERIFIED.verify(credentials.credentials, secret)
    except TokenRejected as exc:
        raise ProblemError(UNAUTHENTICATED, str(exc),
                           headers=_challenge("invalid_token", str(exc))) from exc
    request.scope.setdefault("state", {})["user_id"] = str(principal.user_id)
    await request.app.state.known_users.ensure(request.app.state.pg, principal.user_id)
    return principal


CurrentUser = Annotated[Principal, Depends(current_user)]


async def current_moderator(user: CurrentUser) -> Principal:
    """The caller, if the token carries the moderator role; 403 otherwise."""
    if not user.is_moderator:
        raise ProblemError(FORBIDDEN, "the moderator role is required",
                           headers=_challenge("insufficient_scope"))
    return user


Moderator = Annotated[Principal, Depends(current_moderator)]
