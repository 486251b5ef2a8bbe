"""Which signing secrets a process may start with.

The JWT secret and the cursor keys have built-in development values so that a checkout
runs without set-up. Anyone who reads this repository knows them, so a process that
accepts them in production accepts forged tokens and cursors. The rules, checked at
startup by every process that signs or verifies with them (the API):

* a secret shorter than ``MIN_SECRET_BYTES`` is refused, in every mode;
* a built-in development secret is refused unless ``FEED_DEV_MODE=true``;
* except the JWT secret where the API verifies gateway tokens with a JWKS
  (``FEED_JWT_JWKS_URL`` or ``_FILE``): left at its built-in value, HS256 is then off.

``make run``, ``deploy/services.py``, the tests and the benchmarks set the flag.
"""
from __future__ import annotations

from .settings import ApiSettings

# HMAC-SHA256 keys: RFC 7518 (section 3.2) requires at least the hash size, 32 bytes, for
# HS256; the cursor MAC is the same construction, so the same floor.
MIN_SECRET_BYTES = 32
# Printed with every refusal: one way to make a good secret.
HOW_TO_GENERATE = "python -c 'import secrets; print(secrets.token_urlsafe(48))'"


class UnsafeSecrets(RuntimeError):
    """The process must not start: its message lists every problem and the fix."""


def _default(field: str) -> str:
    """The built-in value of a secret field (the development value)."""
    value: str = ApiSettings.model_fields[field].default.get_secret_value()
    return value


def _cursor_secrets(spec: str) -> list[str]:
    """The secrets of ``"kid:secret,kid:secret"`` (format errors are the parser's job)."""
    return [part.strip().partition(":")[2] for part in spec.split(",") if part.strip()]


def _built_in_in_use(settings: ApiSettings) -> tuple[bool, bool]:
    """Whether the JWT secret, and any cursor key, is a built-in development value."""
    dev_cursor = set(_cursor_secrets(_default("cursor_keys")))
    return (settings.jwt_secret.get_secret_value() == _default("jwt_secret"),
            bool(dev_cursor & set(_cursor_secrets(settings.cursor_keys.get_secret_value()))))


def hs256_off(settings: ApiSettings) -> bool:
    """HS256 tokens are refused: a JWKS verifies the gateway's tokens and the JWT secret
    was left at its built-in value outside development mode."""
    return (bool(settings.jwt_jwks_url or settings.jwt_jwks_file) and not settings.dev_mode
            and settings.jwt_secret.get_secret_value() == _default("jwt_secret"))


def secret_problems(settings: ApiSettings) -> list[str]:
    """Everything wrong with the secrets of ``settings``; empty when it may start."""
    problems: list[str] = []
    jwt_secret_used = not hs256_off(settings)
    if jwt_secret_used and len(settings.jwt_secret.get_secret_value().encode()) < MIN_SECRET_BYTES:
        problems.append(f"FEED_JWT_SECRET is shorter than {MIN_SECRET_BYTES} bytes")
    cursor_secrets = _cursor_secrets(settings.cursor_keys.get_secret_value())
    if any(len(s.encode()) < MIN_SECRET_BYTES for s in cursor_secrets):
        problems.append(f"a FEED_CURSOR_KEYS secret is shorter than {MIN_SECRET_BYTES} bytes")
    if not settings.dev_mode:
        dev_jwt, dev_cursor = _built_in_in_use(settings)
        if dev_jwt and jwt_secret_used:
            problems.append("FEED_JWT_SECRET is the built-in development secret")
        if dev_cursor:
            problems.append("FEED_CURSOR_KEYS holds the built-in development cursor key")
    return problems


def require_safe_secrets(settings: ApiSettings) -> None:
    """Raise ``UnsafeSecrets`` naming each problem and the fix, unless all is well."""
    problems = secret_problems(settings)
    if not problems:
        return
    fix = (f"Set FEED_JWT_SECRET and FEED_CURSOR_KEYS (\"kid:secret,...\") to random secrets "
           f"of at least {MIN_SECRET_BYTES} bytes ({HOW_TO_GENERATE})")
    if not settings.dev_mode and any(_built_in_in_use(settings)):
        fix += ", or FEED_DEV_MODE=true on a development machine to accept the built-in ones"
    raise UnsafeSecrets(f"refusing to start: {'; '.join(problems)}. {fix}.")
