"""``python -m services.shared.settings``: every ``FEED_*`` variable as Markdown tables, one
per block, with the processes that read it (``processes.PROCESSES``): the variable (and
its ``_FILE`` form for secrets), the default, and the comment
written above the field in the block's source (or its ``Field(description=...)``). Every
field has such a comment: one short line saying what it is and its unit.

docs/deploy.md holds this output ("Every variable"); paste it again after changing a block.
"""
from __future__ import annotations

import ast
import inspect
import io
import tokenize
from datetime import timedelta

from pydantic import SecretStr

from . import (ActivitySettings, ApiSettings, CassandraSettings, CdcSettings, FanoutSettings,
               FeedSettings, KafkaSettings, MetricsSettings, PostgresSettings, RankerSettings,
               TopicSettings, WorkerSettings)
from .base import PREFIX, _is_secret
from .processes import PROCESSES

BLOCKS: list[tuple[str, type[FeedSettings]]] = [
    ("Postgres", PostgresSettings), ("Kafka", KafkaSettings), ("topics", TopicSettings),
    ("Cassandra", CassandraSettings),
    ("API", ApiSettings), ("activity", ActivitySettings), ("workers", WorkerSettings),
    ("metrics", MetricsSettings), ("fan-out", FanoutSettings), ("ranker", RankerSettings), ("CDC", CdcSettings)]


def field_comments(cls: type) -> dict[str, str]:
    """``{field: the comment lines right above it, joined}`` from the class's source."""
    source = inspect.getsource(cls)
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT}
    out: dict[str, str] = {}
    tree = ast.parse(source).body[0]
    assert isinstance(tree, ast.ClassDef)
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            line, above = node.lineno - 1, list[str]()
            while line in comments:
                above.insert(0, comments[line])
                line -= 1
            out[node.target.id] = " ".join(above)
    return out


def default_text(value: object) -> str:
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        return f"P{seconds / 86400:g}D" if seconds % 86400 == 0 else f"{seconds:g} s"
    return f"`{value}`" if value != "" else "(empty)"


def table(cls: type[FeedSettings]) -> list[str]:
    comments = field_comments(cls)
    rows = ["| variable | default | what it is |", "| --- | --- | --- |"]
    for name, field in cls.model_fields.items():
        var = f"`{PREFIX}{name.upper()}`"
        if _is_secret(field):
            var += f", `{PREFIX}{name.upper()}_FILE`"
        text = field.description or comments.get(name, "")
        rows.append(f"| {var} | {default_text(field.default)} | {text.replace('|', '/')} |")
    return rows


def main() -> None:
    for title, cls in BLOCKS:
        doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())  # first paragraph
        readers = [f"`{name}`" for name, process in PROCESSES if issubclass(process, cls)]
        print(f"**{title}** (`{cls.__name__}`, read by {', '.join(readers)}): {doc}\n")
        print("\n".join(table(cls)) + "\n")


if __name__ == "__main__":
    main()
