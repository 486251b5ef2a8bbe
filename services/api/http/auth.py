"""Bearer-token authentication: JWTs with ``sub`` and ``exp`` required.

HS256 tokens are checked against ``jwt_secret`` (development, a gateway sharing it).
RS256 and ES256 tokens, as API gateways send them, are checked against the issuer's JWKS
(``jwks.py``) when ``jwt_jwks_url`` or ``jwt_jwks_file`` is set. The key is chosen by the
header's ``alg`` and ``kid``: HS256 only ever uses the secret and the JWKS only gives RS256
and ES256 keys, so ``alg: none`` and RS/HS key confusion are refused by construction.
``exp``, ``nbf`` and ``iat`` allow ``jwt_leeway_s`` of clock skew; ``iss`` and ``aud`` are
checked when ``jwt_issuer`` and ``jwt_audience`` are set. ``sub`` is the user id as a
decimal string of a positive 64-bit integer. Moderation needs ``roles`` to contain
``moderator``.

Route code depends on ``CurrentUser`` or ``Moderator``; the user row is created on the
first authenticated request (``KnownUsers``).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import jwt
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from jwt.types import Options

from services.shared.secret_policy import hs256_off
from services.shared.settings import ApiSettings

from .jwks import ALGORITHMS as JWKS_ALGORITHMS
from .jwks import JwksKeys, jwks_keys
from .problems import FORBIDDEN, UNAUTHENTICATED, ProblemError

ALGORITHM = "HS256"
MODERATOR_ROLE = "moderator"
MAX_USER_ID = (1 << 63) - 1
# Clock skew allowed when no settings say otherwise (jwt_leeway_s's default).
LEEWAY_SECONDS = int(ApiSettings.model_fields["jwt_leeway_s"].default)


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


def _header(token: str) -> dict[str, Any]:
    try:
        return jwt.get_unverified_header(token)
    except jwt.InvalidTokenError as exc:
        raise TokenRejected("token is not valid") from exc


# (principal, accepted until (exp + leeway), kid, the JWKS key or None for HS256)
_Remembered = tuple[Principal, float, str, jwt.PyJWK | None]


class TokenVerifier:
    """Verifies tokens (see the module docstring) and remembers verified ones until they
    expire: a client sends the same token with every request, and verification plus two
    JSON decodes was ~4 % of a warm feed page's CPU (py-spy, read grid). Only a verified
    token's exact string is a key, so nothing unverified is ever accepted; ``exp`` is
    still enforced (with the same leeway) on every use, and a token checked with a JWKS
    key is forgotten once that key leaves the JWKS. Bounded: cleared when full."""

    def __init__(self, secret: str, keys: JwksKeys | None = None, *, issuer: str = "",
                 audience: str = "", leeway_s: float = LEEWAY_SECONDS,
                 capacity: int = 10_000, clock: Callable[[], float] = time.time) -> None:
        self.keys = keys
        self._secret = secret
        self._issuer = issuer or None
        self._audience = audience or None
        self._leeway = leeway_s
        require = ["exp", "sub"]
        require += ["iss"] if issuer else []
        require += ["aud"] if audience else []
        self._options: Options = {"require": require, "verify_sub": False,
                                  "verify_aud": bool(audience)}
        self._capacity = capacity
        self._clock = clock
        self._items: dict[str, _Remembered] = {}

    @classmethod
    def from_settings(cls, settings: ApiSettings) -> TokenVerifier:
        """HS256 is off (no secret) where a JWKS is configured and the secret is still the
        built-in development one outside development mode: a gateway deployment need
        not invent a secret it never uses."""
        secret = settings.jwt_secret.get_secret_value()
        if hs256_off(settings):
            secret = ""
        return cls(secret, jwks_keys(settings),
                   issuer=settings.jwt_issuer, audience=settings.jwt_audience,
                   leeway_s=settings.jwt_leeway_s)

    def cached(self, token: str) -> Principal | None:
        """The principal of a token verified before and still valid; None otherwise
        (the caller then verifies it, and learns why it is refused if it is)."""
        hit = self._items.get(token)
        if hit is not None:
            principal, until, kid, key = hit
            if self._clock() < until and (key is None or (
                    self.keys is not None and self.keys.get(kid) is key)):
                return principal
            self._items.pop(token, None)
        return None

    def verify(self, token: str) -> Principal:
        """The token's principal; blocking: a JWKS is loaded in this thread if needed."""
        hit = self.cached(token)
        if hit is not None:
            return hit
        header = _header(token)
        kid = self._jwks_kid(header)
        key = None if kid is None or self.keys is None else self.keys.key_for(kid)
        return self._check(token, header, key)

    async def verify_async(self, token: str) -> Principal:
        """``verify`` for the event loop: a JWKS is loaded in a thread."""
        hit = self.cached(token)
        if hit is not None:
            return hit
        header = _header(token)
        kid = self._jwks_kid(header)
        key = None if kid is None or self.keys is None else await self.keys.key_for_async(kid)
        return self._check(token, header, key)

    def check(self, token: str) -> Principal:
        """``verify`` without the memory, and without loading a JWKS."""
        header = _header(token)
        kid = self._jwks_kid(header)
        key = None if kid is None or self.keys is None else self.keys.get(kid)
        return self._verified(token, header, key)[0]

    def _jwks_kid(self, header: dict[str, Any]) -> str | None:
        """The kid to look up: for a JWKS algorithm when a JWKS is configured."""
        if self.keys is None or header.get("alg") not in JWKS_ALGORITHMS:
            return None
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise TokenRejected("token lacks a key id (kid)")
        return kid

    def _check(self, token: str, header: dict[str, Any], key: jwt.PyJWK | None) -> Principal:
        principal, exp = self._verified(token, header, key)
        if isinstance(exp, (int, float)):
            if len(self._items) >= self._capacity:
                self._items.clear()
            self._items[token] = (principal, float(exp) + self._leeway,
                                  str(header.get("kid")), key)
        return principal

    def _verified(self, token: str, header: dict[str, Any],
                  key: jwt.PyJWK | None) -> tuple[Principal, Any]:
        """The principal and the ``exp`` claim of a token signed with the right key."""
        alg = header.get("alg")
        signing: str | jwt.PyJWK
        if alg == ALGORITHM and self._secret:
            signing = self._secret
        elif alg in JWKS_ALGORITHMS and self.keys is not None:
            if key is None:
                raise TokenRejected("token signing key is not known")
            signing = key
        else:
            raise TokenRejected("token algorithm is not accepted")
        try:
            claims = jwt.decode(token, signing, algorithms=[alg], leeway=self._leeway,
                                issuer=self._issuer, audience=self._audience,
                                options=self._options)
        except jwt.ExpiredSignatureError as exc:
            raise TokenRejected("token expired") from exc
        except jwt.ImmatureSignatureError as exc:
            raise TokenRejected("token is not valid yet") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRejected(f"token lacks the {exc.claim} claim") from exc
        except jwt.InvalidAudienceError as exc:
            raise TokenRejected("token audience is not accepted") from exc
        except jwt.InvalidIssuerError as exc:
            raise TokenRejected("token issuer is not accepted") from exc
        except jwt.InvalidTokenError as exc:
            raise TokenRejected("token is not valid") from exc
        roles = claims.get("roles", [])
        if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
            raise TokenRejected("roles must be a list of strings")
        principal = Principal(user_id=parse_user_id(claims["sub"]), roles=frozenset(roles))
        return principal, claims["exp"]


def verify_token(token: str, secret: str) -> Principal:
    """Check an HS256 token's signature, algorithm and claims; return who it speaks for."""
    return TokenVerifier(secret).check(token)


class VerifiedTokens:
    """``TokenVerifier`` memories for callers that hold only an HS256 secret."""

    def __init__(self, capacity: int = 10_000, clock: Callable[[], float] = time.time) -> None:
        self._capacity = capacity
        self._clock = clock
        self._by_secret: dict[str, TokenVerifier] = {}

    def _verifier(self, secret: str) -> TokenVerifier:
        verifier = self._by_secret.get(secret)
        if verifier is None:
            if len(self._by_secret) >= 8:
                self._by_secret.clear()
            verifier = self._by_secret[secret] = TokenVerifier(
                secret, capacity=self._capacity, clock=self._clock)
        return verifier

    def cached(self, token: str, secret: str) -> Principal | None:
        return self._verifier(secret).cached(token)

    def verify(self, token: str, secret: str) -> Principal:
        return self._verifier(secret).verify(token)


def token_verifier(state: Any) -> TokenVerifier:
    """The app's verifier (``app.state.token_verifier``), made from its settings on first use."""
    verifier: TokenVerifier | None = getattr(state, "token_verifier", None)
    if verifier is None:
        verifier = state.token_verifier = TokenVerifier.from_settings(state.settings)
    return verifier


def known_principal(token: str, state: Any) -> Principal | None:
    """The caller of a token the app has verified and that is still valid."""
    return token_verifier(state).cached(token)


def mint_token(user_id: int, secret: str, *, roles: tuple[str, ...] = (),
               ttl_seconds: int = 3600, now: float | None = None, issuer: str = "",
               audience: str = "") -> str:
    """An HS256 token for ``user_id`` (development and tests); ``iss`` and ``aud`` when given."""
    issued = int(time.time() if now is None else now)
    claims: dict[str, Any] = {"sub": str(user_id), "iat": issued, "exp": issued + ttl_seconds}
    if roles:
        claims["roles"] = list(roles)
    if issuer:
        claims["iss"] = issuer
    if audience:
        claims["aud"] = audience
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def _challenge(error: str | None = None, description: str | None = None) -> dict[str, str]:
    value = 'Bearer realm="feed"'
    if error:
        value += f', error="{error}"'
    if description:
        value += f', error_description="{description}"'
    return {"WWW-Authenticate": value}


# Documents the scheme in OpenAPI; errors are ours (problem+json with a challenge).
bearer_scheme = HTTPBearer(auto_error=False,
                           description="JWT with sub and exp: HS256, or RS256/ES256 (JWKS)")


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
    try:
        principal = await token_verifier(request.app.state).verify_async(credentials.credentials)
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
