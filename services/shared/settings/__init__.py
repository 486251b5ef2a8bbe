"""Typed settings, read from ``FEED_*`` environment variables, in blocks.

* ``stores``: ``PostgresSettings``, ``KafkaSettings``, ``CassandraSettings``: where each
  store is and how to connect securely (the client factories take only these).
* ``services``: ``ApiSettings``, ``FanoutSettings``, ``RankerSettings``, ``CdcSettings``,
  and what several share (``WorkerSettings``, ``ActivitySettings``).
* ``base``: the prefix, ``*_FILE`` secrets and the old ``FEED_FEED_*`` names.
* ``__main__``: every variable as Markdown tables.
* ``Settings``: every block at once, what a process built from one checkout reads;
  ``get_settings()`` builds it once per process.

``docs/deploy.md`` lists every variable (checked by a test); ``docs/configuration.md``
says why the defaults are what they are.
"""
from __future__ import annotations

import logging
import os
from functools import lru_cache
from typing import Mapping

from pydantic import ValidationError

from .base import LEGACY_PREFIX, FeedSettings, SettingsError, env_names
from .services import (ActivitySettings, ApiSettings, CdcSettings, FanoutSettings, RankerSettings,
                       WorkerSettings)
from .stores import CassandraSettings, KafkaSettings, PostgresSettings

__all__ = ["ActivitySettings", "ApiSettings", "CassandraSettings", "CdcSettings", "FanoutSettings",
           "FeedSettings", "KafkaSettings", "PostgresSettings", "RankerSettings", "Settings",
           "SettingsError", "WorkerSettings", "env_names", "get_settings"]

log = logging.getLogger(__name__)


class Settings(ApiSettings, FanoutSettings, RankerSettings, CdcSettings, WorkerSettings,
               ActivitySettings, PostgresSettings, KafkaSettings, CassandraSettings):
    """Every block: a function that needs one store or one service's settings takes that
    block's type, and is handed this."""


# Variables no release reads any more, and what replaced them: warned about at start.
RETIRED = {
    "VISIBILITY_RETENTION_S": "visibility-log entries are no longer forgotten by age: the "
                              "fan-out's verifier releases them once their copies are checked "
                              "(FEED_VISIBILITY_SETTLE_S, docs/read-path.md)",
    "VISIBILITY_TRIM_S": "the API no longer trims the visibility log: the fan-out's verifier does",
}


def warn_retired(environ: Mapping[str, str]) -> list[str]:
    """One warning per retired variable set (as FEED_X or the legacy FEED_FEED_X)."""
    warned = []
    for name, why in RETIRED.items():
        for prefix in ("FEED_", LEGACY_PREFIX):
            if prefix + name in environ:
                warned.append(f"settings: {prefix + name} is no longer read: {why}")
    for line in warned:
        log.warning(line)
    return warned


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """This process's settings; a value that cannot be used ends the process with one
    line per problem, naming the variable."""
    warn_retired(os.environ)
    try:
        return Settings()
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = "FEED_" + "_".join(str(p) for p in error["loc"]).upper() if error["loc"] else ""
            problems.append(f"settings: {where + ': ' if where else ''}{error['msg']}")
        raise SettingsError("\n".join(problems)) from None
