"""Public keys for gateway tokens (RS256, ES256): the issuer's JWKS, from a URL or a file.

``get(kid)`` only reads the keys in memory. Loading is blocking (urllib, file reads), so
callers on the event loop use the ``*_async`` methods, which load in a thread. A JWKS that
cannot be read or holds no usable key leaves the known keys in place; a successful load
replaces them, so a key removed by the issuer stops verifying.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jwt import PyJWK, PyJWKClient
from jwt.exceptions import PyJWTError

from services.shared.settings import ApiSettings

ALGORITHMS = frozenset({"RS256", "ES256"})

log = logging.getLogger("services.api.http.jwks")


class JwksError(ValueError):
    """A JWKS document with no usable signing key."""


def signing_keys(document: Any) -> dict[str, tuple[dict[str, Any], PyJWK]]:
    """The RS256 and ES256 signing keys of a JWKS document by kid, each with its JWK.

    Keys without a kid, for another use or algorithm, or too short are skipped."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksError("not a JWKS document (an object with a keys list)")
    keys: dict[str, tuple[dict[str, Any], PyJWK]] = {}
    for jwk in document["keys"]:
        if (not isinstance(jwk, dict) or not isinstance(jwk.get("kid"), str) or not jwk["kid"]
                or jwk["kid"] in keys or jwk.get("use", "sig") != "sig"
                or jwk.get("alg", "RS256") not in ALGORITHMS):
            continue
        try:
            key = PyJWK(jwk)
        except (PyJWTError, TypeError, ValueError):
            continue  # a key type or curve PyJWT cannot use
        if key.algorithm_name in ALGORITHMS and not key.Algorithm.check_key_length(key.key):
            keys[jwk["kid"]] = (jwk, key)
    if not keys:
        raise JwksError("the JWKS holds no RS256 or ES256 signing key with a kid")
    return keys


class JwksKeys:
    """Signing keys by kid; subclasses say where they come from and when to reload."""

    # Whether a due reload may run while verification goes on with the current keys.
    background = False

    def __init__(self, where: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.where = where
        self._clock = clock
        self._keys: dict[str, tuple[dict[str, Any], PyJWK]] = {}
        self._lock = threading.Lock()
        self._inflight: asyncio.Task[None] | None = None
        self.loaded_at: float | None = None
        self.attempted_at: float | None = None

    def get(self, kid: str) -> PyJWK | None:
        entry = self._keys.get(kid)
        return None if entry is None else entry[1]

    @property
    def kids(self) -> frozenset[str]:
        return frozenset(self._keys)

    def due(self) -> bool:
        """A reload is due now."""
        raise NotImplementedError

    def worth_retry(self) -> bool:
        """A token's unknown kid may reload the JWKS now."""
        raise NotImplementedError

    def _read(self) -> Any:
        """The JWKS document (blocking)."""
        raise NotImplementedError

    def key_for(self, kid: str) -> PyJWK | None:
        """The key for ``kid``, after a reload if one is due, or if ``kid`` is unknown and
        a reload is allowed (blocking)."""
        with self._lock:
            if self.due() or (kid not in self._keys and self.worth_retry()):
                self._reload()
        return self.get(kid)

    # Callers on the event loop: loads run in a thread, one at a time.

    async def load_async(self) -> None:
        """Load now (the API's start-up, so the first gateway token does not wait)."""
        await asyncio.shield(self._reload_task())

    async def refresh_if_due_async(self) -> None:
        if self.due():
            task = self._reload_task()
            if not self.background:
                await asyncio.shield(task)

    async def key_for_async(self, kid: str) -> PyJWK | None:
        await self.refresh_if_due_async()
        key = self.get(kid)
        if key is None and (self._loading() or self.worth_retry()):
            await asyncio.shield(self._reload_task())
            key = self.get(kid)
        return key

    def _loading(self) -> bool:
        task = self._inflight
        return task is not None and not task.done()

    def _reload_task(self) -> asyncio.Task[None]:
        loop = asyncio.get_running_loop()
        task = self._inflight
        if task is None or task.done() or task.get_loop() is not loop:
            task = self._inflight = loop.create_task(asyncio.to_thread(self._reload_locked),
                                                     name="jwks-reload")
        return task

    def _reload_locked(self) -> None:
        with self._lock:
            self._reload()

    def _reload(self) -> None:
        """Load the JWKS (under ``_lock``); on failure keep the known keys."""
        self.attempted_at = self._clock()
        try:
            fresh = signing_keys(self._read())
        except Exception as exc:  # noqa: BLE001 - a bad JWKS never takes the known keys away
            log.warning("JWKS not loaded, %d known keys kept: %s", len(self._keys), exc,
                        extra={"jwks": self.where})
            return
        # An unchanged key keeps its object, so tokens remembered with it stay valid.
        old = self._keys
        self._keys = {kid: old[kid] if kid in old and old[kid][0] == jwk else (jwk, key)
                      for kid, (jwk, key) in fresh.items()}
        self.loaded_at = self.attempted_at
        if set(old) != set(fresh):
            log.info("JWKS loaded: kids %s", sorted(fresh), extra={"jwks": self.where})


class UrlJwks(JwksKeys):
    """A JWKS URL: kept ``max_age_s``, then reloaded in the background; an unknown kid
    reloads at once. Fetches, failed ones too, are at least ``min_refresh_s`` apart."""

    background = True

    def __init__(self, url: str, *, max_age_s: float, min_refresh_s: float, timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(url, clock=clock)
        # Only its fetch is used (http(s) only, no redirects); the caching is ours.
        self._client = PyJWKClient(url, cache_jwk_set=False, timeout=timeout_s)
        self.max_age_s = max_age_s
        self.min_refresh_s = min_refresh_s

    def worth_retry(self) -> bool:
        return (self.attempted_at is None
                or self._clock() - self.attempted_at >= self.min_refresh_s)

    def due(self) -> bool:
        return ((self.loaded_at is None or self._clock() - self.loaded_at >= self.max_age_s)
                and self.worth_retry())

    def _read(self) -> Any:
        return self._client.fetch_data()


_NEVER = object()


class FileJwks(JwksKeys):
    """A JWKS file, reloaded when its mtime, size or inode changes (replace it atomically,
    or touch it after writing)."""

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(str(path), clock=clock)
        self.path = Path(path)
        self._read_version: object = _NEVER

    def _version(self) -> object:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def due(self) -> bool:
        return self._version() != self._read_version

    def worth_retry(self) -> bool:
        return self.due()

    def _read(self) -> Any:
        self._read_version = self._version()
        return json.loads(self.path.read_bytes())


def jwks_keys(settings: ApiSettings) -> JwksKeys | None:
    """The key source the settings configure, if any (the URL when both are set)."""
    if settings.jwt_jwks_url:
        if settings.jwt_jwks_file:
            log.warning("both FEED_JWT_JWKS_URL and FEED_JWT_JWKS_FILE are set: using the URL")
        return UrlJwks(settings.jwt_jwks_url, max_age_s=settings.jwt_jwks_cache_s,
                       min_refresh_s=settings.jwt_jwks_min_refresh_s,
                       timeout_s=settings.jwt_jwks_timeout_s)
    if settings.jwt_jwks_file:
        return FileJwks(settings.jwt_jwks_file)
    return None
