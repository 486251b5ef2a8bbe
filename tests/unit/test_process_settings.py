"""Each service reads only its own blocks and its stores' blocks.

* In the source: a service's modules import from ``services.shared.settings`` only the
  names their process may read (mypy then refuses a read of another block's field).
* At run time: a process parses only its own variables, so a bad value meant for another
  service does not stop it, and a bad value of its own does, naming the variable.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from services.shared.settings import (ApiProcess, CdcProcess, FanoutProcess, MigrateProcess,
                                      RankerProcess, Settings, SettingsError, WorkerProcess,
                                      env_names,
                                      forget_loaded, load)
from services.shared.settings.processes import across_processes

REPO = Path(__file__).resolve().parents[2]
STORES = {"PostgresSettings", "KafkaSettings", "CassandraSettings", "SettingsError", "load"}
WORKER = {"WorkerProcess", "WorkerSettings", "MetricsSettings", "ActivitySettings"}
# What each folder's modules may import from services.shared.settings.
ALLOWED = {
    "services/api": STORES | {"ApiProcess", "ApiSettings", "ActivitySettings"},
    "services/fanout": STORES | WORKER | {"FanoutProcess", "FanoutSettings"},
    "services/ranker": STORES | WORKER | {"RankerProcess", "RankerSettings"},
    "services/cdc": STORES | {"CdcProcess", "CdcSettings", "MetricsSettings"},
    # Code shared by several services takes a block or the workers' common class.
    "services/shared": STORES | WORKER | {"ApiSettings"},
}


def settings_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.ImportFrom) and node.module
                and node.module.startswith("services.shared.settings")):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return found


def offenders(folder: str, allowed: set[str]) -> list[str]:
    out = []
    for path in sorted((REPO / folder).rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("services/shared/settings/"):
            continue
        for line, name in settings_imports(ast.parse(path.read_text())):
            if name not in allowed:
                out.append(f"{rel}:{line}: imports {name}")
    return out


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_a_service_imports_only_its_own_settings(folder: str) -> None:
    assert offenders(folder, ALLOWED[folder]) == []


def test_the_import_check_sees_an_offender(tmp_path: Path) -> None:
    tree = ast.parse("from services.shared.settings import Settings, ApiProcess\n"
                     "def f():\n    from services.shared.settings.services import FanoutSettings\n")
    names = {name for _, name in settings_imports(tree)}
    assert names - ALLOWED["services/api"] == {"Settings", "FanoutSettings"}


def test_each_process_holds_only_its_blocks() -> None:
    api, fanout = set(ApiProcess.model_fields), set(FanoutProcess.model_fields)
    ranker, cdc = set(RankerProcess.model_fields), set(CdcProcess.model_fields)
    assert not any(f.startswith(("fanout_", "ranker_", "cdc_", "consumer_")) for f in api)
    assert not any(f.startswith(("api_", "jwt_", "cdc_", "ranker_", "snapshot_")) for f in fanout)
    assert not any(f.startswith(("api_", "fanout_", "cdc_", "pg_")) for f in ranker)
    assert not any(f.startswith(("api_", "fanout_", "ranker_", "cassandra_")) for f in cdc)
    migrate = set(MigrateProcess.model_fields)
    assert not any(f.startswith(("api_", "fanout_", "ranker_", "cdc_")) for f in migrate)
    # Together they are every setting: nothing is read by no process.
    assert api | fanout | ranker | cdc | migrate == set(Settings.model_fields)


@pytest.fixture
def fresh() -> object:
    forget_loaded()
    yield
    forget_loaded()


def test_another_services_bad_value_does_not_stop_a_process(
        monkeypatch: pytest.MonkeyPatch, fresh: object) -> None:
    monkeypatch.setenv("FEED_FANOUT_BATCH_ROWS", "many")
    monkeypatch.setenv("FEED_API_PORT", "eighty")
    assert load(RankerProcess).ranker_keys_in_flight > 0
    assert load(CdcProcess).cdc_publication
    with pytest.raises(SettingsError, match="FEED_FANOUT_BATCH_ROWS"):
        load(FanoutProcess)
    with pytest.raises(SettingsError, match="FEED_API_PORT"):
        load(ApiProcess)


def test_load_builds_a_process_once(monkeypatch: pytest.MonkeyPatch, fresh: object) -> None:
    monkeypatch.setenv("FEED_RANKER_KEYS_IN_FLIGHT", "7")
    first = load(RankerProcess)
    monkeypatch.setenv("FEED_RANKER_KEYS_IN_FLIGHT", "9")
    assert load(RankerProcess) is first and first.ranker_keys_in_flight == 7
    forget_loaded()
    assert load(RankerProcess).ranker_keys_in_flight == 9


def test_every_variable_is_read_by_some_process() -> None:
    read = set().union(*(env_names(cls) for cls in (ApiProcess, FanoutProcess, RankerProcess,
                                                    CdcProcess, MigrateProcess)))
    assert read == set(env_names(Settings))


def test_a_settle_time_under_the_apis_cache_hold_is_reported() -> None:
    assert across_processes(Settings()) == []
    problems = across_processes(Settings(visibility_settle_s=90, cache_ttl_s=300))
    assert len(problems) == 1 and "FEED_VISIBILITY_SETTLE_S" in problems[0]
    # An account state kept longer than the entry lives: a stale "not hidden" outlives it.
    problems = across_processes(Settings(account_cache_s=400))
    assert len(problems) == 1 and "FEED_ACCOUNT_CACHE_S" in problems[0]
    # One process alone cannot see the other's settings: nothing to say.
    assert across_processes(FanoutProcess(visibility_settle_s=1)) == []


# Where a service's code reads ``settings.<name>``, whatever the static type says (an
# ``app.state.settings`` is ``Any`` to mypy): the name must be one its process holds.
READS = re.compile(r"settings\.([a-z_][a-z0-9_]*)")
PROCESS_OF = {"services/api": ApiProcess, "services/fanout": FanoutProcess,
              "services/ranker": RankerProcess, "services/cdc": CdcProcess,
              "services/shared/worker": WorkerProcess}


def foreign_reads(folder: str, process: type) -> list[str]:
    every = set(Settings.model_fields) | {n for n in dir(Settings) if not n.startswith("_")}
    own = set(process.model_fields) | {n for n in dir(process) if not n.startswith("_")}
    out = []
    for path in sorted((REPO / folder).rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name in READS.findall(line):
                if name in every and name not in own:
                    out.append(f"{path.relative_to(REPO)}:{number}: settings.{name}")
    return out


@pytest.mark.parametrize("folder", sorted(PROCESS_OF))
def test_a_service_reads_only_settings_its_process_holds(folder: str) -> None:
    assert foreign_reads(folder, PROCESS_OF[folder]) == []
