"""The local stack's listening ports stay below the kernel's range for outgoing
connections: a server inside it may find its port taken by a client that reconnected to
itself while it was down (deploy/stack/process.py, ``in_ephemeral_range``)."""
from __future__ import annotations

from pathlib import Path

from deploy.stack.layout import Layout
from deploy.stack.process import in_ephemeral_range


def test_the_range_is_read_from_the_kernels_file(tmp_path: Path) -> None:
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")
    assert in_ephemeral_range(55432, ranges) and in_ephemeral_range(32768, ranges)
    assert not in_ephemeral_range(25432, ranges) and not in_ephemeral_range(61000, ranges)
    assert not in_ephemeral_range(55432, tmp_path / "missing")


def test_the_default_ports_are_below_linuxs_default_range(monkeypatch) -> None:
    for name in ("FEED_PG_PORT", "FEED_KAFKA_PORT", "FEED_CASSANDRA_PORT", "FEED_API_PORT",
                 "FEED_PROMETHEUS_PORT"):
        monkeypatch.delenv(name, raising=False)
    layout = Layout.from_env()
    ports = [layout.pg_port, layout.kafka_port, layout.cassandra_port]
    assert all(port < 32768 for port in ports), ports
