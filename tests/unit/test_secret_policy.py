"""The API refuses the built-in development secrets without FEED_DEV_MODE, and short ones always."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from services.api import __main__ as api_main
from services.api.app import create_app
from services.shared.secret_policy import (MIN_SECRET_BYTES, UnsafeSecrets, require_safe_secrets,
                                           secret_problems)
from services.shared.settings import Settings, forget_loaded, get_settings

STRONG = "s" * MIN_SECRET_BYTES
SHORT = "s" * (MIN_SECRET_BYTES - 1)
DEV_JWT = Settings.model_fields["jwt_secret"].default.get_secret_value()
DEV_CURSOR = Settings.model_fields["cursor_keys"].default.get_secret_value()


@pytest.fixture(autouse=True)
def no_secrets_in_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Only what a test sets: no secret or flag from the environment running the suite."""
    for name in ("FEED_JWT_SECRET", "FEED_CURSOR_KEYS", "FEED_DEV_MODE"):
        monkeypatch.delenv(name, raising=False)
    forget_loaded()
    yield
    forget_loaded()


def test_built_in_secrets_are_refused_without_the_development_flag() -> None:
    problems = secret_problems(Settings(dev_mode=False))
    assert problems == ["FEED_JWT_SECRET is the built-in development secret",
                        "FEED_CURSOR_KEYS holds the built-in development cursor key"]
    with pytest.raises(UnsafeSecrets, match="FEED_DEV_MODE=true"):
        require_safe_secrets(Settings(dev_mode=False))


def test_built_in_secrets_are_accepted_with_the_development_flag() -> None:
    require_safe_secrets(Settings(dev_mode=True))


def test_the_flag_and_the_secrets_come_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().dev_mode is False, "production is the default"
    monkeypatch.setenv("FEED_DEV_MODE", "true")
    require_safe_secrets(Settings())
    monkeypatch.setenv("FEED_DEV_MODE", "false")
    monkeypatch.setenv("FEED_JWT_SECRET", STRONG)
    monkeypatch.setenv("FEED_CURSOR_KEYS", f"k2:{STRONG}")
    require_safe_secrets(Settings())


def test_own_secrets_of_the_minimum_length_are_accepted_without_the_flag() -> None:
    require_safe_secrets(Settings(dev_mode=False, jwt_secret=STRONG,
                                  cursor_keys=f"new:{STRONG},old:{'o' * 40}"))


@pytest.mark.parametrize("dev_mode", [False, True])
def test_a_short_secret_is_refused_even_with_the_flag(dev_mode: bool) -> None:
    short_jwt = Settings(dev_mode=dev_mode, jwt_secret=SHORT, cursor_keys=f"k2:{STRONG}")
    assert secret_problems(short_jwt) == [
        f"FEED_JWT_SECRET is shorter than {MIN_SECRET_BYTES} bytes"]
    short_cursor = Settings(dev_mode=dev_mode, jwt_secret=STRONG,
                            cursor_keys=f"new:{STRONG},old:{SHORT}")
    assert secret_problems(short_cursor) == [
        f"a FEED_CURSOR_KEYS secret is shorter than {MIN_SECRET_BYTES} bytes"]
    with pytest.raises(UnsafeSecrets) as refused:
        require_safe_secrets(short_jwt)
    assert "FEED_DEV_MODE" not in str(refused.value), "the flag would not help: no hint"


def test_the_length_is_counted_in_bytes_not_characters() -> None:
    # 16 two-byte characters: 32 bytes of key material.
    require_safe_secrets(Settings(dev_mode=False, jwt_secret="é" * 16,
                                  cursor_keys=f"k2:{STRONG}"))


def test_the_development_cursor_key_is_refused_even_beside_a_real_one() -> None:
    problems = secret_problems(Settings(dev_mode=False, jwt_secret=STRONG,
                                        cursor_keys=f"new:{STRONG},{DEV_CURSOR}"))
    assert problems == ["FEED_CURSOR_KEYS holds the built-in development cursor key"]


def test_the_api_command_exits_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEED_DEV_MODE", "false")
    monkeypatch.setattr(api_main.uvicorn, "run", lambda *a, **k: pytest.fail("uvicorn started"))
    with pytest.raises(SystemExit) as exited:
        api_main.main()
    message = str(exited.value.code)
    assert message.startswith("services.api: refusing to start: FEED_JWT_SECRET is the built-in")
    assert "FEED_DEV_MODE=true" in message and DEV_JWT not in message


def test_the_app_refuses_to_start_before_opening_any_client() -> None:
    app = create_app(Settings(dev_mode=False, pg_port=1))  # no Postgres there: never reached

    async def start() -> None:
        async with app.router.lifespan_context(app):
            pytest.fail("the app started")

    with pytest.raises(UnsafeSecrets):
        asyncio.run(start())


def test_a_gateway_deployment_needs_no_jwt_secret_and_refuses_hs256(tmp_path) -> None:
    from services.api.http.auth import TokenRejected, TokenVerifier, mint_token
    jwks = tmp_path / "jwks.json"
    jwks.write_text('{"keys": []}')
    strong = "s" * 40
    gateway = Settings(dev_mode=False, jwt_jwks_file=str(jwks), cursor_keys=f"k2:{strong}")
    require_safe_secrets(gateway)  # the built-in JWT secret is not used: HS256 is off
    token = mint_token(1, Settings.model_fields["jwt_secret"].default.get_secret_value())
    with pytest.raises(TokenRejected, match="algorithm"):
        TokenVerifier.from_settings(gateway).check(token)
    # A secret set on purpose keeps HS256 beside the JWKS; development mode keeps the built-in one.
    both = Settings(dev_mode=False, jwt_jwks_file=str(jwks), jwt_secret=strong, cursor_keys=f"k2:{strong}")
    assert TokenVerifier.from_settings(both).check(mint_token(7, strong)).user_id == 7
    dev = Settings(dev_mode=True, jwt_jwks_file=str(jwks))
    assert TokenVerifier.from_settings(dev).check(token).user_id == 1
