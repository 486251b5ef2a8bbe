"""Typed settings, read from ``FEED_*`` environment variables, in blocks.

* ``stores``: ``PostgresSettings``, ``KafkaSettings``, ``CassandraSettings``: where each
  store is and how to connect securely (the client factories take only these).
* ``services``: ``ApiSettings``, ``FanoutSettings``, ``RankerSettings``, ``CdcSettings``,
  and what several share (``WorkerSettings``, ``ActivitySettings``).
* ``base``: the prefix, ``*_FILE`` secrets and the old ``FEED_FEED_*`` names.
* ``Settings``: every block at once, what a process built from one checkout reads;
  ``get_settings()`` builds it once per process.

``docs/deploy.md`` lists every variable (checked by a test); ``docs/configuration.md``
says why the defaults are what they are.
"""
from __future__ import annotations

from functools import lru_cache

from pydantic import ValidationError

from .base import FeedSettings, SettingsError, env_names
from .services import (ActivitySettings, ApiSettings, CdcSettings, FanoutSettings, RankerSettings,
                       WorkerSettings)
from .stores import CassandraSettings, KafkaSettings, PostgresSettings

__all__ = ["ActivitySettings", "ApiSettings", "CassandraSettings", "CdcSettings", "FanoutSettings",
           "FeedSettings", "KafkaSettings", "PostgresSettings", "RankerSettings", "Settings",
           "SettingsError", "WorkerSettings", "env_names", "get_settings"]


class Settings(ApiSettings, FanoutSettings, RankerSettings, CdcSettings, WorkerSettings,
               ActivitySettings, PostgresSettings, KafkaSettings, CassandraSettings):
    """Every block: a function that needs one store or one service's settings takes that
    block's type, and is handed this."""


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """This process's settings; a value that cannot be used ends the process with one
    line per problem, naming the variable."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = "FEED_" + "_".join(str(p) for p in error["loc"]).upper() if error["loc"] else ""
            problems.append(f"settings: {where + ': ' if where else ''}{error['msg']}")
        raise SettingsError("\n".join(problems)) from None
