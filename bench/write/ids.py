"""Ids: the generator's rate against the layout's ceiling, and what the key type costs
the Postgres primary-key index.

The specification claims random keys (UUIDv4) leave B-tree pages ~69 % full (Yao), i.e. an index
about 1.44x the size of one built from time-ordered keys. This loads the same number of
rows keyed by Snowflake ids (bigint), UUIDv7 and UUIDv4, in arrival order, and reports
the measured index sizes and their ratios.
"""
from __future__ import annotations

import io
import os
import secrets
import time
import uuid
from dataclasses import dataclass

from services.api.write.idgen import SnowflakeGenerator
from services.shared.settings import Settings
from services.shared.clients import pg

CEILING_PER_S = 4096 * 1000  # 12-bit sequence per millisecond per node


def uuid7(unix_ms: int) -> uuid.UUID:
    """RFC 9562 UUIDv7: 48-bit ms timestamp, version 7, 74 random bits, variant 10."""
    rand = int.from_bytes(os.urandom(10), "big")
    value = (unix_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)


@dataclass
class IdRate:
    ids_per_s: float
    ceiling_per_s: int

    @property
    def share_of_ceiling(self) -> float:
        return self.ids_per_s / self.ceiling_per_s


def generator_rate(n: int = 500_000) -> IdRate:
    gen = SnowflakeGenerator(1)
    start = time.perf_counter()
    for _ in range(n):
        gen.next_id()
    return IdRate(n / (time.perf_counter() - start), CEILING_PER_S)


def _keys(kind: str, n: int) -> list[str]:
    if kind == "snowflake":
        gen = SnowflakeGenerator(2)
        return [str(gen.next_id()) for _ in range(n)]
    now = int(time.time() * 1000)
    if kind == "uuidv7":
        # Spread over n ms (about 17 minutes per million), like arrivals of real traffic.
        return [str(uuid7(now + i)) for i in range(n)]
    return [str(uuid.uuid4()) for _ in range(n)]


def index_sizes(settings: Settings, rows: int = 1_000_000) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    suffix = secrets.token_hex(3)
    with pg.connect(settings, autocommit=True) as conn:
        for kind, sqltype in (("snowflake", "bigint"), ("uuidv7", "uuid"), ("uuidv4", "uuid")):
            table = f"bench_keys_{kind}_{suffix}"
            conn.execute(f"CREATE UNLOGGED TABLE {table} (id {sqltype} PRIMARY KEY)")
            try:
                data = io.StringIO("\n".join(_keys(kind, rows)) + "\n")
                start = time.perf_counter()
                with conn.cursor().copy(f"COPY {table} (id) FROM STDIN") as copy:
                    while chunk := data.read(1 << 20):
                        copy.write(chunk)
                seconds = time.perf_counter() - start
                size = conn.execute(f"SELECT pg_relation_size('{table}_pkey')").fetchone()[0]
                out[kind] = {"rows": rows, "index_bytes": size, "load_s": round(seconds, 2)}
            finally:
                conn.execute(f"DROP TABLE {table}")
    base = out["snowflake"]["index_bytes"]
    for kind in out:
        out[kind]["ratio_to_snowflake"] = round(out[kind]["index_bytes"] / base, 3)
    out["uuidv4"]["ratio_to_uuidv7"] = round(out["uuidv4"]["index_bytes"] / out["uuidv7"]["index_bytes"], 3)
    return out


if __name__ == "__main__":
    from services.shared.settings import get_settings

    rate = generator_rate()
    print(f"ids: {rate.ids_per_s:,.0f}/s = {rate.share_of_ceiling:.1%} of the {CEILING_PER_S:,}/s ceiling")
    for kind, info in index_sizes(get_settings()).items():
        print(kind, info)
