"""Typed settings, read from ``FEED_*`` environment variables, in blocks.

* ``stores``: ``PostgresSettings``, ``KafkaSettings``, ``CassandraSettings``: where each
  store is and how to connect securely (the client factories take only these).
* ``services``: ``ApiSettings``, ``FanoutSettings``, ``RankerSettings``, ``CdcSettings``,
  and what several share (``WorkerSettings``, ``MetricsSettings``, ``ActivitySettings``).
* ``processes``: what each service reads, ``ApiProcess``, ``FanoutProcess``,
  ``RankerProcess``, ``CdcProcess`` (and the migrator, ``MigrateProcess``): its blocks and its stores' blocks, nothing else;
  ``load(cls)`` builds one once per process.
* ``base``: the prefix, ``*_FILE`` secrets and the old ``FEED_FEED_*`` names.
* ``__main__``: every variable as Markdown tables, with the processes that read it.
* ``Settings``: every block at once, for the tools that drive every process (the
  migrator, the demo, the bench, the tests); ``get_settings()`` is ``load(Settings)``.

``docs/deploy.md`` lists every variable (checked by a test); ``docs/configuration.md``
says why the defaults are what they are.
"""
from __future__ import annotations

import logging
import os
from typing import Mapping, TypeVar

from pydantic import ValidationError

from .base import LEGACY_PREFIX, FeedSettings, SettingsError, env_names
from .processes import (ApiProcess, CdcProcess, FanoutProcess, MigrateProcess, RankerProcess,
                        WorkerProcess)
from .services import (ActivitySettings, ApiSettings, CdcSettings, FanoutSettings,
                       MetricsSettings, RankerSettings, TopicSettings, WorkerSettings)
from .stores import CassandraSettings, KafkaSettings, PostgresSettings

__all__ = ["ActivitySettings", "ApiProcess", "ApiSettings", "CassandraSettings", "CdcProcess",
           "CdcSettings", "FanoutProcess", "FanoutSettings", "FeedSettings", "KafkaSettings",
           "MetricsSettings", "MigrateProcess", "PostgresSettings", "RankerProcess",
           "RankerSettings", "Settings", "SettingsError", "TopicSettings", "WorkerProcess", "WorkerSettings", "env_names", "forget_loaded", "get_settings", "load"]

log = logging.getLogger(__name__)


class Settings(ApiProcess, FanoutProcess, RankerProcess, CdcProcess, MigrateProcess):
    """Every block, for tools that drive every process. A service never builds this: it
    builds its own process class, and its functions take that class or one block."""


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


S = TypeVar("S", bound=FeedSettings)
_loaded: dict[type[FeedSettings], FeedSettings] = {}


def load(cls: type[S]) -> S:
    """This process's settings of class ``cls``, built once; a value that cannot be used
    ends the process with one line per problem, naming the variable. Only the variables
    of ``cls``'s blocks are read."""
    if cls not in _loaded:
        warn_retired(os.environ)
        try:
            _loaded[cls] = cls()
        except ValidationError as exc:
            problems = []
            for error in exc.errors():
                where = ("FEED_" + "_".join(str(p) for p in error["loc"]).upper()
                         if error["loc"] else "")
                problems.append(f"settings: {where + ': ' if where else ''}{error['msg']}")
            raise SettingsError("\n".join(problems)) from None
    loaded = _loaded[cls]
    assert isinstance(loaded, cls)
    return loaded


def get_settings() -> Settings:
    """Every block (tools only; a service calls ``load`` with its process class)."""
    return load(Settings)


def forget_loaded() -> None:
    """Build every class again on its next ``load`` (after the environment changed)."""
    _loaded.clear()
