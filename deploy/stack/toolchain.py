"""The programs the stack needs (JDK 17, Maven, PostgreSQL 15, Prometheus and the
postgres exporter) and the jar cache.

Kafka and Cassandra are not Debian or PyPI packages: their runtime classpaths are
assembled from Maven Central by ``mvn dependency:copy-dependencies`` on the small poms in
``deploy/maven/<name>/``, each into its own lib folder (their logging stacks clash on one
classpath); so is the JMX exporter's agent jar (``jmx-exporter``). ``~/.m2`` caches the
downloads; a ``.complete`` marker tells a finished lib folder from one an interrupted run
left half-written.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .layout import REPO, Layout
from .process import StackError, run_checked

JAVA17_CANDIDATES = (
    "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
    "/usr/lib/jvm/java-17-openjdk-arm64/bin/java",
)
PG_BIN = Path(os.environ.get("FEED_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _apt_install(packages: list[str], why: str, log: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise StackError(f"{why}: install {' '.join(packages)} (needs root and apt-get)")
    print(f"stack: installing {' '.join(packages)} ({why})", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run_checked(["apt-get", "update", "-q"], "apt-get update", log, env=env)
    run_checked(["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
                f"apt-get install {' '.join(packages)}", log, env=env)


def _programs(names: list[str], package: str, why: str, log: Path) -> list[str]:
    """The paths of ``names``, Debian's ``package`` installed first when one is missing."""
    if not all(shutil.which(n) for n in names):
        _apt_install([package], f"{' or '.join(names)} missing ({why})", log)
    paths = [shutil.which(n) for n in names]
    missing = [n for n, p in zip(names, paths) if p is None]
    if missing:
        raise StackError(f"{package} was installed but {', '.join(missing)} is not on PATH")
    return paths  # type: ignore[return-value]


def ensure_nft(log: Path) -> str:
    """``nft`` (Debian's nftables): the fault suite cuts a node off the network with it
    (netem does not work on these machines; nftables does)."""
    return _programs(["nft"], "nftables", "the fault suite's network cuts", log)[0]


def ensure_openssl(log: Path) -> str:
    """``openssl`` (Debian's package): the three-node stack's CA and certificates."""
    return _programs(["openssl"], "openssl", "the secured stack's certificates", log)[0]


def ensure_wrk(log: Path) -> str:
    """``wrk`` (Debian's package): the C load generator of every read benchmark figure."""
    return _programs(["wrk"], "wrk", "the read benchmarks' HTTP load", log)[0]


def ensure_prometheus(log: Path) -> tuple[str, str]:
    """``prometheus`` and ``promtool`` (Debian's package, 2.42 on bookworm): the stack
    scrapes the services with it and the tests check the alert rules."""
    server, tool = _programs(["prometheus", "promtool"], "prometheus", "metrics, alert rules", log)
    return server, tool


def ensure_postgres_exporter(log: Path) -> str:
    """``prometheus-postgres-exporter`` (Debian's package, 0.11 on bookworm): the stack runs
    it beside its Postgres (``exporters.py``). Where the install started the package's own
    service (systemd: every address, port 9187, the machine's default cluster), it is
    stopped again: the stack runs its own, as with Postgres's ``main`` cluster."""
    found = shutil.which("prometheus-postgres-exporter")
    if found:
        return found
    path = _programs(["prometheus-postgres-exporter"], "prometheus-postgres-exporter",
                     "the stack's Postgres metrics", log)[0]
    if shutil.which("invoke-rc.d"):
        subprocess.run(["invoke-rc.d", "prometheus-postgres-exporter", "stop"], capture_output=True)
    return path


def ensure_chromium(log: Path) -> tuple[str, str]:
    """``chromium`` and ``chromedriver`` (Debian's packages, one version): the feed page's
    tests drive a real headless browser with them."""
    browser, driver = _programs(["chromium", "chromedriver"], "chromium-driver",
                                "the feed page's browser tests", log)
    return browser, driver


def java17(layout: Layout) -> str:
    explicit = os.environ.get("FEED_JAVA17")
    if explicit:
        if not (Path(explicit).is_file() and os.access(explicit, os.X_OK)):
            raise StackError(f"JDK 17 is missing: FEED_JAVA17={explicit} is not an executable")
        return explicit
    for candidate in JAVA17_CANDIDATES:
        if candidate and Path(candidate).is_file():
            return candidate
    _apt_install(["openjdk-17-jre-headless"], "JDK 17 is missing (Cassandra 5.0 runs on 17 only)",
                 layout.logs / "install.log")
    for candidate in JAVA17_CANDIDATES:
        if candidate and Path(candidate).is_file():
            return candidate
    raise StackError("JDK 17 is missing: set FEED_JAVA17 to a JDK 17 'java' binary")


def ensure_postgres(layout: Layout) -> Path:
    if (PG_BIN / "postgres").is_file():
        return PG_BIN
    _apt_install(["postgresql-15", "postgresql-client-15"], "PostgreSQL 15 is missing",
                 layout.logs / "install.log")
    # Debian's package may start its own 'main' cluster; this stack runs its own, so stop
    # the one the install just started (we started it, we stop it).
    if shutil.which("pg_ctlcluster"):
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "stop"],
                       capture_output=True)
    if not (PG_BIN / "postgres").is_file():
        raise StackError(f"PostgreSQL 15 binaries not found in {PG_BIN}")
    return PG_BIN


def jars(layout: Layout, name: str) -> Path:
    """The lib folder for ``name`` (kafka, cassandra, connect, jmx-exporter), assembled once."""
    lib = layout.lib / name
    marker = lib / ".complete"
    pom = REPO / "deploy" / "maven" / name / "pom.xml"
    if marker.is_file() and marker.read_text() == pom.read_text():
        return lib
    if lib.exists():
        # Interrupted earlier, or the pom changed: start the folder again.
        shutil.rmtree(lib)
    if not shutil.which("mvn"):
        _apt_install(["maven"], "Maven is missing (it assembles the Kafka/Cassandra jars)",
                     layout.logs / "install.log")
    print(f"stack: assembling {name} jars from Maven Central into {lib}", flush=True)
    tmp = lib.with_name(name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    run_checked(
        ["mvn", "-B", "-q", "-f", str(pom), "dependency:copy-dependencies",
         "-DincludeScope=runtime", f"-DoutputDirectory={tmp}"],
        f"assembling {name} jars", layout.logs / "maven.log",
    )
    tmp.rename(lib)
    marker.write_text(pom.read_text())
    return lib
