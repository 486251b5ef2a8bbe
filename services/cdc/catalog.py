"""What the relay reads from the Postgres catalog: captured tables and their primary keys.

Under REPLICA IDENTITY FULL pgoutput flags every column as part of the key, so the
primary key (the Kafka key) is read here, as Debezium reads it over JDBC. Column order
matches pgoutput's: attribute number order, without dropped or generated columns.
"""
from __future__ import annotations

import psycopg

from .envelope import CapturedTable
from .pgoutput import Column, Relation

_COLUMNS_SQL = """
SELECT a.attname, a.atttypid, a.atttypmod,
       coalesce(a.attnum = ANY (i.indkey::int2[]), false) AS in_pk
FROM pg_attribute a
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
ORDER BY a.attnum
"""

_PK_SQL = """
SELECT a.attname
FROM pg_index i
JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, pos) ON true
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = %s AND i.indisprimary
ORDER BY k.pos
"""


def primary_key(conn: psycopg.Connection, rel_id: int) -> tuple[str, ...]:
    return tuple(r[0] for r in conn.execute(_PK_SQL, (rel_id,)).fetchall())


def table_from_relation(conn: psycopg.Connection, relation: Relation) -> CapturedTable:
    """A streamed Relation message plus the table's primary key from the catalog."""
    return CapturedTable(relation.namespace, relation.name, relation.columns,
                         primary_key(conn, relation.rel_id))


def publication_tables(conn: psycopg.Connection, publication: str) -> list[CapturedTable]:
    """Every table of the publication, as seen by this connection's snapshot.

    In creation (oid) order: the order Debezium snapshots them in when its
    table.include.list lists them that way, as deploy/debezium/check.py does.
    """
    rows = conn.execute(
        "SELECT c.oid, n.nspname, c.relname FROM pg_publication_tables p "
        "JOIN pg_namespace n ON n.nspname = p.schemaname "
        "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename "
        "WHERE p.pubname = %s ORDER BY c.oid", (publication,)).fetchall()
    if not rows:
        raise LookupError(f"publication {publication!r} does not exist or captures no table")
    tables = []
    for oid, schema, name in rows:
        cols = conn.execute(_COLUMNS_SQL, (oid,)).fetchall()
        columns = tuple(Column(n, t, m, bool(k)) for n, t, m, k in cols)
        tables.append(CapturedTable(schema, name, columns, primary_key(conn, oid)))
    return tables
