"""The client factories (services/shared/clients) without a stack: what each client
library is handed for a settings block, and how the secrets get into those blocks.

Nothing here connects: the Kafka checks read configurations and keyword arguments,
the Cassandra ones the driver's ``auth_provider`` and ``ssl_context``, the Postgres ones
the libpq connection string.
"""
from __future__ import annotations

import datetime
import logging
import shutil
import ssl
import tempfile
from pathlib import Path

import pytest
from cassandra.auth import PlainTextAuthProvider
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from psycopg.conninfo import conninfo_to_dict
from pydantic import SecretStr

from services.shared.clients import cql, kafka, pg
from services.shared.settings import Settings, SettingsError


@pytest.fixture(autouse=True)
def _no_feed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocks built here see only what each test sets (not the shell's FEED_*)."""
    import os
    for name in list(os.environ):
        if name.startswith("FEED_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A self-signed CA (PEM) and a client certificate and key signed by it."""
    folder = tmp_path_factory.mktemp("pki")
    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(name: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
                    signer: ec.EllipticCurvePrivateKey, ca: bool) -> x509.Certificate:
        return (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                .issuer_name(issuer).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=1))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
                .sign(signer, hashes.SHA256()))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test ca")])
    ca_cert = certificate("test ca", ca_key, ca_name, ca_key, ca=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = certificate("feed", client_key, ca_name, ca_key, ca=False)
    paths = {"ca": folder / "ca.pem", "cert": folder / "client.pem", "key": folder / "client.key"}
    paths["ca"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(client_cert.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(client_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return {name: str(path) for name, path in paths.items()}


def _sasl_ssl(pki: dict[str, str], check_hostname: bool = True) -> Settings:
    return Settings(kafka_bootstrap="k1:9093,k2:9093", kafka_security_protocol="SASL_SSL",
                    kafka_sasl_mechanism="SCRAM-SHA-512", kafka_sasl_username="feed-app",
                    kafka_sasl_password=SecretStr("s3cret"), kafka_ssl_ca_file=pki["ca"],
                    kafka_ssl_check_hostname=check_hostname)


# Kafka: librdkafka (confluent-kafka)

def test_librdkafka_plaintext_is_the_brokers_and_nothing_else() -> None:
    assert kafka.librdkafka_config(Settings(kafka_bootstrap="k1:9092")) == {
        "bootstrap.servers": "k1:9092", "security.protocol": "plaintext"}


@pytest.mark.parametrize("check_hostname, algorithm", [(True, "https"), (False, "none")])
def test_librdkafka_sasl_ssl_scram(pki: dict[str, str], check_hostname: bool, algorithm: str) -> None:
    conf = kafka.librdkafka_config(_sasl_ssl(pki, check_hostname))
    assert conf == {"bootstrap.servers": "k1:9093,k2:9093", "security.protocol": "sasl_ssl",
                    "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "feed-app",
                    "sasl.password": "s3cret", "ssl.ca.location": pki["ca"],
                    "ssl.endpoint.identification.algorithm": algorithm}


def test_librdkafka_ssl_with_a_client_certificate(pki: dict[str, str]) -> None:
    conf = kafka.librdkafka_config(Settings(
        kafka_bootstrap="k1:9093", kafka_security_protocol="SSL", kafka_ssl_ca_file=pki["ca"],
        kafka_ssl_cert_file=pki["cert"], kafka_ssl_key_file=pki["key"],
        kafka_ssl_key_password=SecretStr("keypass")))
    assert conf == {"bootstrap.servers": "k1:9093", "security.protocol": "ssl",
                    "ssl.ca.location": pki["ca"], "ssl.certificate.location": pki["cert"],
                    "ssl.key.location": pki["key"], "ssl.key.password": "keypass",
                    "ssl.endpoint.identification.algorithm": "https"}
    assert not any(key.startswith("sasl.") for key in conf)


def test_a_client_gets_the_connection_and_keeps_its_own_options(monkeypatch: pytest.MonkeyPatch,
                                                                  pki: dict[str, str]) -> None:
    import confluent_kafka
    built: list[dict[str, object]] = []
    monkeypatch.setattr(confluent_kafka, "Producer", lambda conf, **_kw: built.append(conf))
    kafka.producer(_sasl_ssl(pki), {"enable.idempotence": True, "linger.ms": 20})
    assert built[0]["enable.idempotence"] is True and built[0]["linger.ms"] == 20
    assert built[0]["sasl.password"] == "s3cret" and built[0]["bootstrap.servers"] == "k1:9093,k2:9093"


# Kafka: aiokafka and faust say the same

@pytest.mark.parametrize("check_hostname", [True, False])
def test_aiokafka_and_faust_carry_the_same_credentials(pki: dict[str, str], check_hostname: bool) -> None:
    settings = _sasl_ssl(pki, check_hostname)
    kw = kafka.aiokafka_kwargs(settings)
    assert kw["bootstrap_servers"] == "k1:9093,k2:9093"
    assert (kw["security_protocol"], kw["sasl_mechanism"], kw["sasl_plain_username"],
            kw["sasl_plain_password"]) == ("SASL_SSL", "SCRAM-SHA-512", "feed-app", "s3cret")
    assert isinstance(kw["ssl_context"], ssl.SSLContext)
    assert kw["ssl_context"].check_hostname is check_hostname
    assert kw["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in kw["ssl_context"].get_ca_certs()] == [((("commonName", "test ca"),),)]

    broker = kafka.faust_broker(settings)
    assert broker["broker"] == ["kafka://k1:9093", "kafka://k2:9093"]
    # What faust hands its aiokafka consumer: the same as our own aiokafka clients get.
    faust_kw = dict(credentials_to_aiokafka_auth(broker["broker_credentials"]))
    context = faust_kw.pop("ssl_context")
    assert faust_kw == {k: kw[k] for k in ("security_protocol", "sasl_mechanism",
                                            "sasl_plain_username", "sasl_plain_password")}
    assert isinstance(context, ssl.SSLContext) and context.check_hostname is check_hostname


def test_aiokafka_and_faust_plaintext_have_no_credentials() -> None:
    settings = Settings(kafka_bootstrap="k1:9092")
    assert kafka.aiokafka_kwargs(settings) == {"bootstrap_servers": "k1:9092",
                                               "security_protocol": "PLAINTEXT"}
    assert kafka.faust_broker(settings) == {"broker": ["kafka://k1:9092"]}


def test_aiokafka_and_faust_tls_without_sasl(pki: dict[str, str]) -> None:
    settings = Settings(kafka_bootstrap="k1:9093", kafka_security_protocol="SSL",
                        kafka_ssl_ca_file=pki["ca"], kafka_ssl_cert_file=pki["cert"],
                        kafka_ssl_key_file=pki["key"])
    kw = kafka.aiokafka_kwargs(settings)
    assert kw["security_protocol"] == "SSL" and "sasl_mechanism" not in kw
    faust_kw = credentials_to_aiokafka_auth(kafka.faust_broker(settings)["broker_credentials"])
    assert faust_kw["security_protocol"] == "SSL"
    assert isinstance(faust_kw["ssl_context"], ssl.SSLContext)


def test_a_faust_app_gets_the_brokers_and_credentials(pki: dict[str, str]) -> None:
    app = kafka.faust_app(_sasl_ssl(pki), "feed-test-app", web_enabled=False)
    assert [str(url) for url in app.conf.broker] == ["kafka://k1:9093", "kafka://k2:9093"]
    assert app.conf.broker_credentials.username == "feed-app"
    assert app.conf.web_enabled is False


def test_a_faust_app_keeps_its_data_dir_out_of_the_working_directory() -> None:
    app = kafka.faust_app(Settings(kafka_bootstrap="127.0.0.1:1"), "feed-test-data")
    assert app.conf.datadir == Path(tempfile.gettempdir()) / "feed-faust.feed-test-data"
    made = not app.conf.datadir.exists()
    try:
        app._create_directories()  # as a worker's start does: faust makes the folder, not its parents
        assert app.conf.datadir.is_dir() and app.conf.tabledir.is_dir()
    finally:
        if made:
            shutil.rmtree(app.conf.datadir, ignore_errors=True)
    chosen = kafka.faust_app(Settings(kafka_bootstrap="127.0.0.1:1"), "feed-test-data", datadir="/x/y")
    assert chosen.conf.datadir == Path("/x/y")


# Cassandra

def test_cassandra_security_with_credentials_and_tls(pki: dict[str, str]) -> None:
    out = cql.security(Settings(cassandra_username="feed", cassandra_password=SecretStr("cpass"),
                                cassandra_ssl_ca_file=pki["ca"], cassandra_ssl_cert_file=pki["cert"],
                                cassandra_ssl_key_file=pki["key"], cassandra_ssl_check_hostname=False))
    provider = out["auth_provider"]
    assert isinstance(provider, PlainTextAuthProvider)
    assert (provider.username, provider.password) == ("feed", "cpass")
    context = out["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.check_hostname is False
    assert context.verify_mode == ssl.CERT_REQUIRED


def test_cassandra_tls_on_its_own_uses_the_system_trust_and_checks_names() -> None:
    out = cql.security(Settings(cassandra_ssl=True))
    assert set(out) == {"ssl_context"}
    assert isinstance(out["ssl_context"], ssl.SSLContext) and out["ssl_context"].check_hostname


def test_cassandra_security_is_nothing_when_unset() -> None:
    assert cql.security(Settings()) == {}


# Postgres

def test_pg_conninfo_from_the_settings_with_tls(pki: dict[str, str]) -> None:
    info = conninfo_to_dict(pg.conninfo(Settings(
        pg_host="db.internal", pg_port=5432, pg_user="feed_api", pg_password=SecretStr("pw 'x'"),
        pg_database="feed", pg_sslmode="verify-full", pg_sslrootcert=pki["ca"])))
    assert info == {"host": "db.internal", "port": "5432", "user": "feed_api", "password": "pw 'x'",
                    "dbname": "feed", "sslmode": "verify-full", "sslrootcert": pki["ca"],
                    "connect_timeout": "10"}


def test_the_factorys_conninfo_is_the_settings() -> None:
    settings = Settings(pg_sslmode="require")
    assert pg.conninfo(settings) == settings.libpq_conninfo()
    assert conninfo_to_dict(pg.conninfo(settings))["sslmode"] == "require"


def test_pg_conninfo_base_and_the_settings_given_explicitly() -> None:
    base = "host=db.example port=6432 dbname=main user=u password=p sslmode=verify-ca sslrootcert=/ca.pem"
    # Only what was given replaces the base's keyword; defaults do not (sslmode stays).
    info = conninfo_to_dict(pg.conninfo(Settings(pg_conninfo=SecretStr(base), pg_database="scratch")))
    assert info == {"host": "db.example", "port": "6432", "dbname": "scratch", "user": "u",
                    "password": "p", "sslmode": "verify-ca", "sslrootcert": "/ca.pem"}
    # A URI base too; and a call's overrides win over both.
    uri = Settings(pg_conninfo=SecretStr("postgresql://u:p@db.example:6432/main?sslmode=require"),
                   pg_user="other")
    info = conninfo_to_dict(pg.conninfo(uri, dbname="x", connect_timeout=3))
    assert (info["user"], info["password"], info["dbname"], info["sslmode"], info["connect_timeout"]) \
        == ("other", "p", "x", "require", "3")


def test_pg_describe_names_where_without_the_password() -> None:
    text = pg.describe(Settings(pg_password=SecretStr("hunter2"), pg_sslmode="verify-full"))
    assert "hunter2" not in text and "sslmode=verify-full" in text


# Secrets from files, and the old names

def test_secrets_are_read_from_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in (("PG_PASSWORD", "pg-secret"), ("KAFKA_SASL_PASSWORD", "kafka-secret"),
                        ("CASSANDRA_PASSWORD", "cql-secret")):
        path = tmp_path / name.lower()
        path.write_text(value + "\n")  # the trailing newline an editor or a mount leaves
        monkeypatch.setenv(f"FEED_{name}_FILE", str(path))
    settings = Settings()
    assert settings.pg_password.get_secret_value() == "pg-secret"
    assert settings.kafka_sasl_password.get_secret_value() == "kafka-secret"
    assert settings.cassandra_password.get_secret_value() == "cql-secret"
    assert conninfo_to_dict(pg.conninfo(settings))["password"] == "pg-secret"


def test_the_variable_wins_over_its_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("from-file")
    monkeypatch.setenv("FEED_PG_PASSWORD_FILE", str(tmp_path / "pw"))
    monkeypatch.setenv("FEED_PG_PASSWORD", "from-env")
    assert Settings().pg_password.get_secret_value() == "from-env"


def test_an_unreadable_secret_file_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    monkeypatch.setenv("FEED_KAFKA_SASL_PASSWORD_FILE", str(tmp_path / "missing"))
    with pytest.raises(SettingsError, match="FEED_KAFKA_SASL_PASSWORD_FILE"):
        Settings()


def test_the_old_doubled_names_are_read_with_a_warning(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("FEED_FEED_SNAPSHOT_TTL_S", "42")
    with caplog.at_level(logging.WARNING, logger="feed.settings"):
        settings = Settings()
    assert settings.snapshot_ttl_s == 42
    assert any("FEED_FEED_SNAPSHOT_TTL_S" in r.getMessage() and "FEED_SNAPSHOT_TTL_S" in r.getMessage()
               for r in caplog.records)


def test_the_new_name_wins_over_the_old(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEED_FEED_SNAPSHOT_TTL_S", "42")
    monkeypatch.setenv("FEED_SNAPSHOT_TTL_S", "7")
    assert Settings().snapshot_ttl_s == 7
