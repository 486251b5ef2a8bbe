"""The three-node stack's security: a private CA, a certificate per node, generated
passwords, and the settings the stack's own clients (probes, role bootstrap) are built
from.

One node stays plaintext (fast ``make run``/``make test``); three nodes are secured as a
production cluster is: TLS everywhere, SCRAM for Kafka, password roles for Cassandra and
Postgres. Everything is made once, at the first ``up --nodes 3``, under the stack folder,
and re-used afterwards:

* ``pki/ca.pem`` (``ca.key``): the CA; ``pki/node<i>.pem`` / ``.key`` the node's
  certificate (its address and ``localhost`` in subjectAltName) and key, and
  ``node<i>-bundle.pem`` both in one file (Kafka's and Cassandra's PEM key stores);
  ``pki/postgres.pem`` / ``.key`` the Postgres server's.
* ``secrets/<name>.password``: one random password per account (``PASSWORDS``).

Keys and passwords are 0600. The client settings (``deploy/secured-stack.env``) point at
these files; passwords are always given as ``*_FILE`` paths.
"""
from __future__ import annotations

import ipaddress
import os
import re
import secrets as _random
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .layout import REPO, Layout
from .process import StackError
from .toolchain import ensure_openssl

if TYPE_CHECKING:
    from services.shared.settings import Settings

# What the three-node stack's security looks like; data made under another version (or
# none: plaintext) cannot be reused as such (Kafka re-formats, see kafka.py).
VERSION = "secured-v1"
ENV_FILE = REPO / "deploy" / "secured-stack.env"

# secrets/<name>.password -> what it is.
PASSWORDS = {
    "kafka-feed": "Kafka SCRAM-SHA-512 user 'feed' (the services)",
    "kafka-broker": "Kafka SCRAM-SHA-512 user 'broker' (inter-broker traffic)",
    "cassandra-feed": "Cassandra role 'feed' (the services, migrations)",
    "cassandra-admin": "Cassandra superuser role 'admin' (replaces 'cassandra')",
    "pg-feed": "Postgres role 'feed' (the services, migrations)",
    "pg-postgres": "Postgres superuser 'postgres' (the stack's own bootstrap)",
    "pg-monitor": "Postgres role 'feed_monitor' (pg_monitor: the postgres exporter)",
}
KAFKA_BROKER_USER = "broker"
CASSANDRA_ADMIN = "admin"
CERT_DAYS = 3650


def secured(layout: Layout) -> bool:
    """Three nodes are secured; one node stays plaintext. ``FEED_STACK_SECURED=false``
    starts three plaintext nodes: only to measure what TLS and SASL cost (use a stack
    folder of its own: switching a folder between the two reformats Kafka)."""
    flag = os.environ.get("FEED_STACK_SECURED", "true").strip().lower()
    return layout.nodes == 3 and flag not in ("0", "false", "no", "off")


def pki(layout: Layout) -> Path:
    return layout.root / "pki"


def secrets_dir(layout: Layout) -> Path:
    return layout.root / "secrets"


def ca_file(layout: Layout) -> Path:
    return pki(layout) / "ca.pem"


def cert(layout: Layout, name: str) -> Path:
    return pki(layout) / f"{name}.pem"


def key(layout: Layout, name: str) -> Path:
    return pki(layout) / f"{name}.key"


def bundle(layout: Layout, name: str) -> Path:
    """Key and certificate chain in one PEM file (Kafka's and Cassandra's key stores)."""
    return pki(layout) / f"{name}-bundle.pem"


def password_file(layout: Layout, name: str) -> Path:
    return secrets_dir(layout) / f"{name}.password"


def password(layout: Layout, name: str) -> str:
    """The generated password ``name`` (made with the others if missing)."""
    if not password_file(layout, name).is_file():
        ensure_secrets(layout)
    return password_file(layout, name).read_text().strip()


# Secrets -------------------------------------------------------------------------
def ensure_secrets(layout: Layout) -> None:
    """One random password per account, made once (URL-safe characters: they go into
    JAAS lines, SCRAM format arguments and CQL strings unquoted)."""
    folder = secrets_dir(layout)
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    for name in PASSWORDS:
        path = password_file(layout, name)
        if path.is_file() and path.read_text().strip():
            continue
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(_random.token_urlsafe(24) + "\n")


# PKI -----------------------------------------------------------------------------
def _openssl(layout: Layout, *args: str) -> None:
    openssl = ensure_openssl(layout.logs / "install.log")
    proc = subprocess.run([openssl, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise StackError(f"pki: openssl {args[0]} failed in {pki(layout)}: "
                         f"{(proc.stderr or proc.stdout).strip()[-1000:]}")


def _private(path: Path) -> None:
    os.chmod(path, 0o600)


def _san(names: list[str]) -> str:
    out = []
    for n in dict.fromkeys(names):
        try:
            ipaddress.ip_address(n)
            out.append(f"IP:{n}")
        except ValueError:
            out.append(f"DNS:{n}")
    return ",".join(out)


def leaf_names(layout: Layout) -> dict[str, list[str]]:
    """Certificate name -> the addresses it names: each node its own address, the
    Postgres server its host and the loopback (``localhost`` in every one)."""
    out = {f"node{i}": [h, "localhost"] for i, h in enumerate(layout.hosts, start=1)}
    out["postgres"] = [layout.pg_host, "127.0.0.1", "localhost"]
    return out


def ensure_pki(layout: Layout) -> None:
    """The CA and each certificate, made when missing (or, for a leaf, when the names it
    must carry changed); never replaced otherwise."""
    folder = pki(layout)
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o755)  # certificates are public; keys are 0600
    ca_key, ca_pem = key(layout, "ca"), ca_file(layout)
    if not (ca_key.is_file() and ca_pem.is_file()):
        _openssl(layout, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256",
                 "-days", str(CERT_DAYS), "-subj", f"/O=feed stack/CN=feed stack CA {layout.root.name}",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                 "-keyout", str(ca_key), "-out", str(ca_pem))
        _private(ca_key)
    for name, names in leaf_names(layout).items():
        san = _san(names)
        stamp = folder / f"{name}.san"
        k, c, b = key(layout, name), cert(layout, name), bundle(layout, name)
        if k.is_file() and c.is_file() and b.is_file() and stamp.is_file() \
                and stamp.read_text().strip() == san:
            continue
        csr = folder / f"{name}.csr"
        ext = folder / f"{name}.ext"
        # PKCS#8, unencrypted: Kafka's and Cassandra's PEM stores read it without a password.
        _openssl(layout, "req", "-newkey", "rsa:2048", "-nodes", "-sha256",
                 "-subj", f"/O=feed stack/CN={name}", "-keyout", str(k), "-out", str(csr))
        _private(k)
        ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
                       "keyUsage=critical,digitalSignature,keyEncipherment\n"
                       # Server and client: Kafka's controllers and Cassandra's nodes
                       # authenticate each other with these (mutual TLS).
                       "extendedKeyUsage=serverAuth,clientAuth\n")
        _openssl(layout, "x509", "-req", "-in", str(csr), "-CA", str(ca_pem), "-CAkey", str(ca_key),
                 "-CAcreateserial", "-days", str(CERT_DAYS), "-sha256", "-extfile", str(ext),
                 "-out", str(c))
        csr.unlink()
        ext.unlink()
        fd = os.open(b, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(k.read_text() + c.read_text() + ca_pem.read_text())
        stamp.write_text(san + "\n")


def ensure(layout: Layout) -> None:
    """Everything the secured stack needs on disk, made once (no-op on one node)."""
    if secured(layout):
        ensure_secrets(layout)
        ensure_pki(layout)


# Client settings -----------------------------------------------------------------
_VAR = re.compile(r"\$\{(\w+)\}")


def env_file_settings(layout: Layout, path: Path = ENV_FILE) -> dict[str, str]:
    """``deploy/secured-stack.env`` with ``${FEED_STACK_DIR}`` (and any other
    ``${VAR}`` from the environment) expanded; KEY=VALUE lines, ``#`` comments."""
    out: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise StackError(f"{path}:{number}: not a KEY=VALUE line: {raw!r}")

        def expand(m: re.Match[str]) -> str:
            if m.group(1) == "FEED_STACK_DIR":
                return str(layout.root)
            if m.group(1) not in os.environ:
                raise StackError(f"{path}:{number}: ${{{m.group(1)}}} is not set")
            return os.environ[m.group(1)]

        out[name.strip()] = _VAR.sub(expand, value.strip())
    return out


# The client settings that one node's (plaintext) probes must not pick up from the
# caller's environment: the stack's own clients say exactly how they connect.
_PLAINTEXT = {"kafka_security_protocol": "PLAINTEXT", "kafka_sasl_username": "",
              "kafka_sasl_password": "", "kafka_ssl_ca_file": "", "kafka_ssl_cert_file": "",
              "kafka_ssl_key_file": "", "cassandra_username": "", "cassandra_password": "",
              "cassandra_ssl": False, "cassandra_ssl_ca_file": "", "cassandra_ssl_cert_file": "",
              "cassandra_ssl_key_file": "", "pg_sslmode": "prefer", "pg_sslrootcert": "",
              "pg_sslcert": "", "pg_sslkey": "", "pg_conninfo": ""}


def settings_fields(env: dict[str, str]) -> dict[str, Any]:
    """``Settings`` keyword arguments from FEED_* variables (``*_FILE`` ones read)."""
    from services.shared.settings import Settings, env_names

    names = env_names(Settings)
    out: dict[str, Any] = {}
    for var, value in env.items():
        field = names.get(var)
        if field is None:
            continue
        if var.endswith("_FILE") and var != f"FEED_{field.upper()}":
            if f"FEED_{field.upper()}" in env:
                continue  # the variable itself wins over its file, as in Settings
            try:
                value = Path(value).read_text().rstrip("\r\n")
            except OSError as exc:
                raise StackError(f"{var}={value}: cannot read it ({exc.strerror or exc})") from None
        out[field] = value
    return out


def client_settings(layout: Layout, **overrides: Any) -> "Settings":
    """The settings the stack's own clients are built from: the layout's client
    environment (the secured settings on three nodes), then ``overrides``."""
    from services.shared.settings import Settings

    return Settings(**{**_PLAINTEXT, **settings_fields(layout.client_env()), **overrides})


def postgres_superuser_settings(layout: Layout) -> "Settings":
    """The ``postgres`` superuser: only the stack's own bootstrap uses it."""
    extra: dict[str, Any] = {"pg_user": "postgres", "pg_database": "postgres"}
    extra["pg_password"] = password(layout, "pg-postgres") if secured(layout) else ""
    return client_settings(layout, **extra)
