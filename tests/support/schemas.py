"""Topic contracts in ``schemas/``: JSON Schemas and example messages, for any consumer.

A topic is named here by its suffix, the topic name without ``<prefix>.``: CDC topics
``public.<table>`` live in ``schemas/cdc/<table>.{key,value}.v<N>.json`` with examples in
``schemas/examples/cdc/<table>/*.json``; any other topic ``<name>`` in
``schemas/<name>.{key,value}.v<N>.json`` and ``schemas/examples/<name>/*.json``. Each
example file is ``{"key": ..., "value": ...}`` as the consumer sees it after JSON decoding
(value null = tombstone). See schemas/README.md.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMAS_DIR = Path(__file__).resolve().parents[2] / "schemas"


@dataclass(frozen=True)
class Example:
    topic_suffix: str
    name: str
    key: Any
    value: Any


def _location(topic_suffix: str) -> tuple[Path, str]:
    if topic_suffix.startswith("public."):
        return SCHEMAS_DIR / "cdc", topic_suffix.split(".", 1)[1]
    return SCHEMAS_DIR, topic_suffix


def topic_suffixes() -> list[str]:
    """Every topic that has a value schema, e.g. ``public.posts``."""
    found = ["public." + p.name.split(".")[0] for p in (SCHEMAS_DIR / "cdc").glob("*.value.v*.json")]
    found += [p.name.rsplit(".value.", 1)[0] for p in SCHEMAS_DIR.glob("*.value.v*.json")]
    return sorted(set(found))


@lru_cache(maxsize=None)
def schema_for(topic_suffix: str, part: str, version: int = 1) -> dict:
    """The JSON Schema of a topic's ``key`` or ``value``."""
    folder, name = _location(topic_suffix)
    return json.loads((folder / f"{name}.{part}.v{version}.json").read_text())


def examples_for(topic_suffix: str) -> list[Example]:
    """Every example message of a topic, sorted by file name."""
    folder, name = _location(topic_suffix)
    base = SCHEMAS_DIR / "examples" / folder.relative_to(SCHEMAS_DIR) / name
    out = []
    for path in sorted(base.glob("*.json")):
        doc = json.loads(path.read_text())
        out.append(Example(topic_suffix, path.stem, doc["key"], doc["value"]))
    return out


def validation_errors(topic_suffix: str, key: Any, value: Any, version: int = 1) -> list[str]:
    """Schema violations of one message (empty when it conforms)."""
    errors = []
    for part, doc in (("key", key), ("value", value)):
        validator = Draft202012Validator(schema_for(topic_suffix, part, version))
        errors += [f"{part}: {'/'.join(map(str, e.absolute_path))}: {e.message}"
                   for e in validator.iter_errors(doc)]
    return errors
