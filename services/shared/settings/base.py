"""What every settings block shares: the ``FEED_`` prefix, secrets read from files, and
the old doubled names accepted for one release.

* A secret field (``SecretStr``) may be given as ``FEED_<NAME>_FILE``, a path whose
  contents (trailing newline stripped) are the value, so no secret has to sit in the
  environment. The variable itself wins over the file when both are set.
* ``FEED_FEED_<NAME>``, the names the read-path settings had before they lost their
  ``feed_`` prefix, are still read, with a warning naming the new variable.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

PREFIX = "FEED_"
LEGACY_PREFIX = "FEED_FEED_"

log = logging.getLogger("feed.settings")


class SettingsError(SystemExit):
    """A setting that cannot be used, said in one line naming the variable."""


def _is_secret(field: FieldInfo) -> bool:
    return field.annotation in (SecretStr, "SecretStr")


class _FilesAndLegacyNames(PydanticBaseSettingsSource):
    """``FEED_<NAME>_FILE`` for secret fields, and ``FEED_FEED_<NAME>`` for any field.
    Lower priority than the plain variables (see ``FeedSettings.settings_customise_sources``)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        name = f"{PREFIX}{field_name.upper()}"
        if _is_secret(field):
            path = os.environ.get(f"{name}_FILE")
            if path:
                try:
                    return Path(path).read_text().rstrip("\r\n"), field_name, False
                except OSError as exc:
                    raise SettingsError(f"settings: {name}_FILE={path}: cannot read it "
                                        f"({exc.strerror or exc})") from None
        legacy = f"{LEGACY_PREFIX}{field_name.upper()}"
        if legacy in os.environ:
            log.warning("settings: %s is read for one more release; rename it to %s", legacy, name)
            return os.environ[legacy], field_name, False
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field_name, field in self.settings_cls.model_fields.items():
            value, key, _ = self.get_field_value(field, field_name)
            if value is not None:
                out[key] = value
        return out


class FeedSettings(BaseSettings):
    """Base of every block: ``FEED_<FIELD NAME>`` variables, unknown ones ignored."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _FilesAndLegacyNames(settings_cls),
                dotenv_settings, file_secret_settings)


def env_names(cls: type[BaseSettings]) -> dict[str, str]:
    """Every variable a settings class reads: ``{FEED_NAME: field}`` (``_FILE`` forms of
    secrets included)."""
    out: dict[str, str] = {}
    for name, field in cls.model_fields.items():
        out[f"{PREFIX}{name.upper()}"] = name
        if _is_secret(field):
            out[f"{PREFIX}{name.upper()}_FILE"] = name
    return out
