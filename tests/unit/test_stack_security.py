"""The three-node stack's security as written to its servers' configuration, and the
one-node stack left plaintext (deploy/stack/security.py, kafka.py, cassandra.py,
postgres.py, layout.py)."""
from __future__ import annotations

import ast
import os
import stat
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from deploy.stack import cassandra, kafka, postgres, security
from deploy.stack.layout import REPO, Layout
from services.shared.settings import Settings

StackLayout = Callable[[int], Layout]


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_one_node_stays_plaintext(stack_layout: StackLayout) -> None:
    layout = stack_layout(1)
    props = _props(kafka._properties(layout, 1))
    assert props["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    assert props["listeners"].startswith("PLAINTEXT://")
    assert not any(k.startswith(("ssl.", "sasl.", "listener.name.")) for k in props)
    assert kafka._scram_users(layout) == []
    yaml = cassandra._yaml(layout, 1)
    assert "authenticator: AllowAllAuthenticator" in yaml and "encryption" not in yaml
    env = layout.client_env()
    assert not any("SSL" in k or "SASL" in k or "PASSWORD" in k or "USERNAME" in k for k in env)
    security.ensure(layout)  # nothing to make
    assert not (layout.root / "pki").exists() and not (layout.root / "secrets").exists()


def test_three_nodes_brokers_speak_sasl_ssl_and_controllers_mutual_tls(stack_layout: StackLayout) -> None:
    layout = stack_layout(3)
    security.ensure_secrets(layout)
    broker = _props(kafka._properties(layout, 2))
    controller = _props(kafka._properties(layout, 2, True))
    assert broker["listeners"] == f"BROKER://127.0.0.2:{layout.kafka_port}"
    assert broker["listener.security.protocol.map"] == "CONTROLLER:SSL,BROKER:SASL_SSL"
    assert broker["inter.broker.listener.name"] == "BROKER"
    assert broker["sasl.enabled.mechanisms"] == broker["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert security.password(layout, "kafka-broker") in broker["listener.name.broker.scram-sha-512.sasl.jaas.config"]
    assert controller["listeners"].startswith("CONTROLLER://")
    assert "sasl.enabled.mechanisms" not in controller
    for props in (broker, controller):
        assert props["listener.name.controller.ssl.client.auth"] == "required"
        assert props["ssl.keystore.type"] == props["ssl.truststore.type"] == "PEM"
        assert props["ssl.keystore.location"].endswith("node2-bundle.pem")
    users = kafka._scram_users(layout)
    assert users[::2] == ["--add-scram", "--add-scram"]
    assert {u.split("[name=")[1].split(",")[0] for u in users[1::2]} == {"feed", "broker"}


def test_three_nodes_cassandra_requires_passwords_and_tls(stack_layout: StackLayout) -> None:
    yaml = cassandra._yaml(stack_layout(3), 3)
    for line in ("authenticator: PasswordAuthenticator", "authorizer: CassandraAuthorizer",
                 "internode_encryption: all", "class_name: org.apache.cassandra.security.PEMBasedSslContextFactory",
                 "  enabled: true", "  optional: false"):
        assert line in yaml
    assert "node3-bundle.pem" in yaml and "AllowAll" not in yaml


def test_pki_names_each_node_and_is_made_once(stack_layout: StackLayout) -> None:
    layout = stack_layout(3)
    security.ensure(layout)
    before = {p.name: p.read_bytes() for p in security.pki(layout).iterdir()}
    security.ensure(layout)
    assert {p.name: p.read_bytes() for p in security.pki(layout).iterdir()} == before
    for i, host in enumerate(layout.hosts, start=1):
        text = subprocess.run(["openssl", "x509", "-in", str(security.cert(layout, f"node{i}")), "-noout",
                               "-ext", "subjectAltName"], capture_output=True, text=True, check=True).stdout
        assert f"IP Address:{host}" in text and "DNS:localhost" in text
        verified = subprocess.run(["openssl", "verify", "-CAfile", str(security.ca_file(layout)),
                                   str(security.cert(layout, f"node{i}"))], capture_output=True, text=True)
        assert verified.returncode == 0, verified.stderr
    private = [*security.pki(layout).glob("*.key"), *security.pki(layout).glob("*-bundle.pem"),
               *security.secrets_dir(layout).glob("*.password")]
    assert len(private) == 5 + 4 + 7  # keys (CA, three nodes, Postgres), bundles, passwords
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in private)


def test_client_env_reads_the_example_file_and_settings_read_the_secrets(stack_layout: StackLayout) -> None:
    layout = stack_layout(3)
    security.ensure(layout)
    env = layout.client_env()
    assert env["FEED_PG_SSLROOTCERT"] == str(layout.root / "pki" / "ca.pem")
    assert env["FEED_CASSANDRA_PASSWORD_FILE"] == str(layout.root / "secrets" / "cassandra-feed.password")
    s = Settings(**security.settings_fields(env))
    assert s.kafka_security_protocol == "SASL_SSL" and s.cassandra_tls and s.pg_sslmode == "verify-full"
    assert s.kafka_sasl_password.get_secret_value() == security.password(layout, "kafka-feed")
    assert s.pg_password.get_secret_value() == security.password(layout, "pg-feed")
    su = security.postgres_superuser_settings(layout)
    assert (su.pg_user, su.pg_password.get_secret_value()) == ("postgres", security.password(layout, "pg-postgres"))


def test_postgres_accepts_only_tls_with_scram_on_three_nodes() -> None:
    assert postgres.SECURED_SETTINGS["ssl"] == "on"
    assert postgres.SECURED_SETTINGS["password_encryption"] == "'scram-sha-256'"
    source = Path(postgres.__file__).read_text()
    hba = [line for line in source.split("hostssl all all", 1)[1].split('else:')[0].splitlines()
           if line.strip().startswith('"host')]
    assert hba and all(line.strip().startswith('"hostssl') and "scram-sha-256" in line for line in hba)


def test_example_file_gives_passwords_only_as_files() -> None:
    lines = [line for line in security.ENV_FILE.read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    names = [line.split("=", 1)[0] for line in lines]
    assert not [n for n in names if "PASSWORD" in n and not n.endswith("_FILE")]
    assert all("${FEED_STACK_DIR}/" in line for line in lines if line.split("=", 1)[0].endswith("_FILE"))


# Client classes the stack must never build itself: its clients come from
# services/shared/clients (the same TLS and credentials as the services).
FORBIDDEN_CALLS = {"AdminClient", "Producer", "Consumer", "Cluster", "connect"}
FORBIDDEN_MODULES = ("confluent_kafka", "cassandra.cluster", "psycopg", "psycopg2")


def test_the_stack_builds_no_client_itself() -> None:
    offenders = []
    for path in sorted((REPO / "deploy" / "stack").glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        imported: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(FORBIDDEN_MODULES):
                for alias in node.names:
                    imported[alias.asname or alias.name] = node.module
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(FORBIDDEN_MODULES):
                        imported[alias.asname or alias.name] = alias.name
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            base = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            if (name in imported and name in FORBIDDEN_CALLS) or (base in imported and name in FORBIDDEN_CALLS):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(func)}")
    assert not offenders, "build clients with services.shared.clients instead:\n" + "\n".join(offenders)


@pytest.mark.skipif(os.geteuid() != 0, reason="checks the postgres user's ownership (root only)")
def test_postgres_gets_its_own_copies_of_the_tls_files(stack_layout: StackLayout) -> None:
    import pwd

    layout = stack_layout(3)
    security.ensure(layout)
    pgdata = postgres._pgdata(layout)
    pgdata.mkdir(parents=True)
    postgres._install_tls(layout)
    key = pgdata / "server.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key.stat().st_uid == pwd.getpwnam("postgres").pw_uid
    assert key.read_text() == security.key(layout, "postgres").read_text()
