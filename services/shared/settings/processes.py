"""What each process reads: its own block, the blocks it shares with its kind, and the
blocks of the stores it uses. A process builds only its class (``load``), so a variable
of another service is never parsed by it: a typo in ``FEED_FANOUT_*`` cannot stop the
API, and mypy refuses code of one service that reads another's setting.

| process | class | blocks |
| --- | --- | --- |
| API (``services.api``) | ``ApiProcess`` | API, activity; Postgres, Kafka, Cassandra |
| fan-out (``services.fanout``) | ``FanoutProcess`` | fan-out, workers, metrics, activity; the three stores |
| ranker (``services.ranker``) | ``RankerProcess`` | ranker, workers, metrics, activity; Kafka, Cassandra |
| relay (``services.cdc``) | ``CdcProcess`` | CDC, metrics; Postgres, Kafka |
| migrator (``deploy.migrate``) | ``MigrateProcess`` | topics; the three stores |
"""
from __future__ import annotations

from .services import (ActivitySettings, ApiSettings, CdcSettings, FanoutSettings,
                       MetricsSettings, RankerSettings, TopicSettings, WorkerSettings)
from .base import FeedSettings
from .stores import CassandraSettings, KafkaSettings, PostgresSettings


class ApiProcess(ApiSettings, PostgresSettings, KafkaSettings, CassandraSettings,
                 ActivitySettings):
    """The API's settings: its block, the activity block, and the three stores."""


class WorkerProcess(WorkerSettings, MetricsSettings, KafkaSettings, CassandraSettings,
                    ActivitySettings):
    """What every stream worker reads (the code in ``services/shared/worker`` takes this):
    Kafka and Cassandra; only the fan-out also reads Postgres (its verifier)."""


class FanoutProcess(FanoutSettings, PostgresSettings, WorkerProcess):
    """The fan-out worker's settings."""


class RankerProcess(RankerSettings, WorkerProcess):
    """The ranker worker's settings."""


class CdcProcess(CdcSettings, PostgresSettings, MetricsSettings, KafkaSettings):
    """The CDC relay's settings."""


class MigrateProcess(TopicSettings, PostgresSettings, KafkaSettings, CassandraSettings):
    """The migrator's settings (``deploy.migrate``): the stores and the topics' sizes."""


PROCESSES: list[tuple[str, type[FeedSettings]]] = [
    ("api", ApiProcess), ("fanout", FanoutProcess), ("ranker", RankerProcess),
    ("cdc", CdcProcess), ("migrate", MigrateProcess)]


def across_processes(settings: ApiProcess | FanoutProcess | RankerProcess | CdcProcess
                     ) -> list[str]:
    """What must hold between two processes' settings, which neither can check alone (the
    launcher, ``deploy/services.py``, warns with these): ``settings`` is every block."""
    problems = []
    if isinstance(settings, ApiProcess) and isinstance(settings, FanoutProcess):
        held = settings.cache_ttl_s + settings.cache_stale_if_error_s
        if settings.visibility_settle_s <= held:
            problems.append(
                f"FEED_VISIBILITY_SETTLE_S ({settings.visibility_settle_s:g} s, the fan-out's) "
                f"is not above the API's cache hold (FEED_CACHE_TTL_S + "
                f"FEED_CACHE_STALE_IF_ERROR_S = {held:g} s): an API process may forget a "
                f"visibility entry while it still serves a copy cached before the repair")
        if settings.visibility_settle_s <= settings.account_cache_s:
            problems.append(
                f"FEED_VISIBILITY_SETTLE_S ({settings.visibility_settle_s:g} s, the fan-out's) "
                f"is not above the API's FEED_ACCOUNT_CACHE_S ({settings.account_cache_s:g} s): "
                f"an API process may forget a suspension's visibility entry while it still "
                f"keeps the author's account as not hidden")
    return problems
