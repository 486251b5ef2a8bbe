"""PostgreSQL 15 from Debian, as a private cluster under the stack folder.

Not the Debian 'main' cluster: this one has its own data folder, port and settings
(``wal_level=logical`` for the CDC relay, ``max_slot_wal_keep_size`` so that a stopped
relay cannot fill the disk). The server refuses to run as root, so as root it runs as the
``postgres`` user.
"""
from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

from . import security
from .layout import Layout
from .process import (StackError, StatusRow, UpReport, ensure_ports_free, port_open, rss_mb, run_checked,
                      tail)
from .toolchain import ensure_postgres

SETTINGS = {
    "listen_addresses": "'{host}'",
    "port": "{port}",
    # TCP only: a socket path under a deep CI folder can exceed the 107-byte limit.
    "unix_socket_directories": "''",
    "wal_level": "logical",
    "max_wal_senders": "16",
    "max_replication_slots": "16",
    # A relay that stops for long loses its slot rather than filling the disk.
    "max_slot_wal_keep_size": "'2GB'",
    "wal_sender_timeout": "'30s'",
    "max_connections": "200",
    "shared_buffers": "'256MB'",
    "logging_collector": "off",
    "log_min_messages": "warning",
    "timezone": "'UTC'",
}


def _reachable_by_postgres(path: Path) -> bool:
    if os.geteuid() != 0:
        return True
    return subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(path)],
                          capture_output=True).returncode == 0


def _base(layout: Layout) -> Path:
    """The Postgres folder: under the stack folder, unless the ``postgres`` user cannot
    reach it (a clone under a private folder such as /tmp/pytest-of-root); then under
    /var/lib/postgresql, keyed by the stack folder so two stacks never share one."""
    layout.root.mkdir(parents=True, exist_ok=True)
    if _reachable_by_postgres(layout.root):
        return layout.data("postgres")
    key = hashlib.sha1(str(layout.root).encode()).hexdigest()[:12]
    return Path("/var/lib/postgresql/feed-stack") / key / f"postgres-{layout.nodes}n"


def _pgdata(layout: Layout) -> Path:
    return _base(layout) / "pgdata"


def _marker(layout: Layout) -> Path:
    return _base(layout) / "initialized"


def _log(layout: Layout) -> Path:
    return _base(layout) / "postgres.log"


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _chown_to_postgres(*paths: Path) -> None:
    if os.geteuid() != 0:
        return
    pw = pwd.getpwnam("postgres")
    for path in paths:
        os.chown(path, pw.pw_uid, pw.pw_gid)


def pid(layout: Layout) -> int | None:
    try:
        value = int((_pgdata(layout) / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        cmdline = Path(f"/proc/{value}/cmdline").read_bytes()
    except OSError:
        return None
    return value if str(_pgdata(layout)).encode() in cmdline else None


def _init(layout: Layout, pg_bin: Path) -> None:
    base = _base(layout)
    if base.exists() and not _marker(layout).exists():
        print(f"stack: postgres: {base} is half-written (an earlier first start did not "
              f"finish); initialising it again", flush=True)
        shutil.rmtree(base)
    if _marker(layout).exists():
        return
    base.mkdir(parents=True)
    if base.parent != layout.data("postgres").parent:
        _chown_to_postgres(base.parent.parent, base.parent)
    _chown_to_postgres(base)
    if os.geteuid() == 0:
        probe = subprocess.run(["runuser", "-u", "postgres", "--", "test", "-w", str(base)])
        if probe.returncode != 0:
            raise StackError(
                f"postgres: the 'postgres' user cannot write {base} (a parent folder is not "
                f"traversable); set FEED_STACK_DIR to a folder it can reach")
    run_checked(_as_postgres([str(pg_bin / "initdb"), "-D", str(_pgdata(layout)), "-U", "postgres",
                              "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"]),
                "postgres initdb", _log(layout))
    _marker(layout).write_text("ok\n")


# The postgres exporter's role (ensure_monitor_role).
MONITOR_ROLE = "feed_monitor"

# Three nodes: TLS with the stack's certificate, passwords hashed with SCRAM (pg_hba).
SECURED_SETTINGS = {
    "ssl": "on",
    "ssl_cert_file": "'server.crt'",
    "ssl_key_file": "'server.key'",
    "ssl_ca_file": "'root.crt'",
    "ssl_min_protocol_version": "'TLSv1.2'",
    "password_encryption": "'scram-sha-256'",
}


def _configure(layout: Layout) -> None:
    pgdata = _pgdata(layout)
    settings = {**SETTINGS, **(SECURED_SETTINGS if security.secured(layout) else {})}
    conf = "\n".join(f"{k} = {v}" for k, v in settings.items()).format(
        host=layout.pg_host, port=layout.pg_port)
    (pgdata / "feed.conf").write_text(conf + "\n")
    main_conf = pgdata / "postgresql.conf"
    if "include 'feed.conf'" not in main_conf.read_text():
        with open(main_conf, "a") as fh:
            fh.write("\ninclude 'feed.conf'\n")
    if security.secured(layout):
        _install_tls(layout)
        # TLS and a SCRAM password for every role, loopback only. A logical replication
        # connection (the CDC relay) matches the ordinary lines for its database; the
        # 'replication' lines are for physical tools (pg_basebackup).
        (pgdata / "pg_hba.conf").write_text(
            "hostssl all all 127.0.0.1/32 scram-sha-256\n"
            "hostssl all all ::1/128 scram-sha-256\n"
            "hostssl replication all 127.0.0.1/32 scram-sha-256\n"
            "hostssl replication all ::1/128 scram-sha-256\n"
        )
    else:
        # Loopback only, trust: a development stack. Replication connections included (CDC).
        (pgdata / "pg_hba.conf").write_text(
            "host all all 127.0.0.1/32 trust\n"
            "host all all ::1/128 trust\n"
            "host replication all 127.0.0.1/32 trust\n"
            "host replication all ::1/128 trust\n"
        )
    _chown_to_postgres(pgdata / "feed.conf", pgdata / "pg_hba.conf")


def _install_tls(layout: Layout) -> None:
    """Copies of the server's certificate, key and the CA inside the data folder, owned by
    ``postgres`` (the key 0600, as the server demands): the stack folder may be out of the
    ``postgres`` user's reach (``_base``)."""
    pgdata = _pgdata(layout)
    for source, name, mode in ((security.cert(layout, "postgres"), "server.crt", 0o644),
                               (security.key(layout, "postgres"), "server.key", 0o600),
                               (security.ca_file(layout), "root.crt", 0o644)):
        target = pgdata / name
        target.unlink(missing_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w") as fh:
            fh.write(source.read_text())
        _chown_to_postgres(target)


def _security_marker(layout: Layout) -> Path:
    return _base(layout) / "security"


def _set_superuser_password(layout: Layout, pg_bin: Path) -> None:
    """Three nodes: give ``postgres`` its generated password, in single-user mode while
    the server is stopped (no connection, so no authentication is needed: this works on
    a fresh folder and on one that ran with trust before). Done when the password or the
    security version changed since the last time (recorded as a digest)."""
    secret = security.password(layout, "pg-postgres")
    stamp = f"{security.VERSION} {hashlib.sha256(secret.encode()).hexdigest()}"
    marker = _security_marker(layout)
    if marker.is_file() and marker.read_text().strip() == stamp:
        return
    # The statement goes through stdin, never the command line; password_encryption is
    # scram-sha-256 (feed.conf), so only the verifier is stored.
    sql = f"ALTER ROLE postgres WITH PASSWORD '{secret}';\n"
    proc = subprocess.run(_as_postgres([str(pg_bin / "postgres"), "--single", "-D", str(_pgdata(layout)),
                                        "-c", "log_min_messages=fatal", "postgres"]),
                          input=sql, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or "ERROR" in proc.stderr + proc.stdout:
        raise StackError(f"postgres: setting the superuser's password failed (exit {proc.returncode}):"
                         f" {(proc.stderr + proc.stdout).strip()[-1000:]}")
    marker.write_text(stamp + "\n")


def _bootstrap_roles(layout: Layout) -> None:
    from services.shared.clients import pg

    feed_password = security.password(layout, "pg-feed") if security.secured(layout) else "feed"
    with pg.connect(security.postgres_superuser_settings(layout), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname='feed'").fetchone():
            conn.execute(f"CREATE ROLE feed LOGIN REPLICATION CREATEDB PASSWORD '{feed_password}'")
        elif security.secured(layout):
            # A role made by a plaintext start (password 'feed') gets the generated one.
            conn.execute(f"ALTER ROLE feed WITH LOGIN REPLICATION CREATEDB PASSWORD '{feed_password}'")
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname='feed'").fetchone():
            conn.execute("CREATE DATABASE feed OWNER feed")


def ensure_monitor_role(layout: Layout) -> None:
    """The role the postgres exporter logs in as (``exporters.py``): ``feed_monitor``, a
    member of ``pg_monitor`` (statistics, settings and replication slots of every
    database; no table's rows), with its generated password on three nodes. Made, or its
    password set again, whenever the exporter starts (the server must be running)."""
    from services.shared.clients import pg

    secret = security.password(layout, "pg-monitor") if security.secured(layout) else None
    with pg.connect(security.postgres_superuser_settings(layout), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname=%s", (MONITOR_ROLE,)).fetchone()
        if not exists:
            conn.execute(f"CREATE ROLE {MONITOR_ROLE} LOGIN")
        if secret is not None:
            conn.execute(f"ALTER ROLE {MONITOR_ROLE} WITH LOGIN PASSWORD '{secret}'")
        conn.execute(f"GRANT pg_monitor TO {MONITOR_ROLE}")


def up(layout: Layout) -> UpReport:
    pg_bin = ensure_postgres(layout)
    if pid(layout):
        return {"state": "already running"}
    ensure_ports_free("postgres", [(layout.pg_host, layout.pg_port)])
    layout.logs.mkdir(parents=True, exist_ok=True)
    security.ensure(layout)
    _init(layout, pg_bin)
    _configure(layout)
    if security.secured(layout):
        _set_superuser_password(layout, pg_bin)
    log = _log(layout)
    log.touch()
    _chown_to_postgres(log)
    visible = layout.logs / "postgres.log"  # `stack logs` finds every log in one folder
    if log != visible and not visible.is_symlink():
        visible.unlink(missing_ok=True)
        visible.symlink_to(log)
    start = time.monotonic()
    proc = subprocess.run(
        _as_postgres([str(pg_bin / "pg_ctl"), "-D", str(_pgdata(layout)), "-l", str(log),
                      "-w", "-t", "90", "start"]),
        capture_output=True, text=True)
    if proc.returncode != 0:
        raise StackError(f"postgres did not start; see {log}\n--- last lines ---\n{tail(log)}")
    _bootstrap_roles(layout)
    return {"state": "started", "seconds": round(time.monotonic() - start, 1)}


def down(layout: Layout) -> bool:
    if not pid(layout):
        return False
    subprocess.run(_as_postgres([str(ensure_postgres(layout) / "pg_ctl"), "-D",
                                 str(_pgdata(layout)), "-m", "fast", "-w", "stop"]),
                   capture_output=True)
    return True


def restart(layout: Layout) -> None:
    """Fast restart in place (used by the CDC fault tests)."""
    down(layout)
    up(layout)


def wipe(layout: Layout) -> None:
    """Remove the data folder wherever it lives (``reset``)."""
    base = _base(layout)
    shutil.rmtree(base, ignore_errors=True)
    if base.parent != layout.data("postgres").parent:
        try:
            base.parent.rmdir()  # the per-stack folder under /var/lib/postgresql, once empty
        except OSError:
            pass


def status(layout: Layout) -> list[StatusRow]:
    p = pid(layout)
    return [{
        "name": "postgres", "pid": p, "address": f"{layout.pg_host}:{layout.pg_port}",
        "ready": bool(p) and port_open(layout.pg_host, layout.pg_port),
        "rss_mb": round(rss_mb(p), 1) if p else 0, "log": str(_log(layout)),
    }]
