"""The folder map of docs/architecture.md, checked: which package may import which.

Every import in ``services/`` (module level and inside functions, relative ones resolved)
is read from the source, so a new upward or sideways import fails here, not in review.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("services.api", "services.cdc", "services.fanout", "services.ranker")

# package prefix -> prefixes it must never import (the importer's own package excepted).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    # Shared code serves every service and knows none of them.
    "services.shared": SERVICES,
    # The rules are pure and stand on nothing else.
    "services.shared.domain": ("services.shared.contracts", "services.shared.worker",
                               "services.shared.stores", "services.shared.settings"),
    # What the parts agree on does not depend on how a process runs or stores.
    "services.shared.contracts": ("services.shared.worker", "services.shared.stores"),
    "services.shared.stores": ("services.shared.worker", "services.shared.contracts"),
    # Each worker owns its data: no service imports another's code...
    "services.cdc": ("services.api", "services.fanout", "services.ranker"),
    "services.ranker": ("services.api", "services.cdc", "services.fanout"),
    "services.fanout": ("services.api", "services.cdc", "services.ranker"),
    # ...and inside the API, the layers point one way: routes -> feed/stream/write/stores.
    "services.api.feed": ("services.api.routes", "services.api.stream", "services.api.http",
                          "services.api.write", "services.api.stores", "services.api.app"),
    "services.api.stream": ("services.api.routes", "services.api.http", "services.api.write",
                            "services.api.stores", "services.api.app"),
    "services.api.write": ("services.api.routes", "services.api.http", "services.api.feed",
                           "services.api.stream", "services.api.stores", "services.api.app"),
    "services.api.stores": ("services.api.routes", "services.api.http", "services.api.feed",
                            "services.api.stream", "services.api.app"),
    "services.api.http": ("services.api.routes", "services.api.feed", "services.api.stream",
                          "services.api.app"),
}
# The one cross-service import, on purpose: a returning reader's inbox is refilled by
# the API with the fan-out's own rebuild (services/api/feed/activity.py).
ALLOWED = {("services.api.feed.activity", "services.fanout.copies"),
           ("services.api.feed.activity", "services.fanout.inbox"),
           ("services.api.feed.activity", "services.fanout.jobs.rebuild")}


def _module(path: Path) -> tuple[str, str]:
    """(module, package) of a source file."""
    dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    if path.name == "__init__.py":
        dotted = dotted.removesuffix(".__init__")
        return dotted, dotted
    return dotted, dotted.rsplit(".", 1)[0]


def imports() -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every import of ``services.*``."""
    found = []
    for path in sorted((ROOT / "services").rglob("*.py")):
        module, package = _module(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            found += [(module, target, node.lineno) for target in targets
                      if target.startswith("services.")]
    return found


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(found: list[tuple[str, str, int]]) -> list[str]:
    bad = []
    for importer, target, line in found:
        rules = [(owner, banned) for owner, banned in FORBIDDEN.items() if _under(importer, owner)]
        for owner, banned in rules:
            for prefix in banned:
                if (_under(target, prefix) and not _under(target, owner)
                        and (importer, target) not in ALLOWED):
                    bad.append(f"{importer}:{line} imports {target} ({owner} must not import {prefix})")
    return sorted(set(bad))


def test_every_import_follows_the_folder_map() -> None:
    assert violations(imports()) == []


def test_the_checker_sees_relative_and_nested_imports() -> None:
    found = {(importer, target) for importer, target, _ in imports()}
    # relative: services/fanout/app.py's "from .inbox import InboxStore"
    assert ("services.fanout.app", "services.fanout.inbox") in found
    # nested (under TYPE_CHECKING): services/api/feed/serving_cache.py's "from .bodies import"
    assert ("services.api.feed.serving_cache", "services.api.feed.bodies") in found


def test_an_upward_import_is_reported() -> None:
    forged = [("services.shared.stores.cql", "services.fanout.inbox", 7),
              ("services.api.feed.reader", "services.api.feed.store", 9),
              ("services.api.feed.activity", "services.fanout.inbox", 31)]
    assert violations(forged) == ["services.shared.stores.cql:7 imports services.fanout.inbox "
                                "(services.shared must not import services.fanout)"]


@pytest.mark.parametrize("folder", ["services/shared/contracts", "services/shared/domain",
                                    "services/shared/worker", "services/shared/stores",
                                    "services/api/http", "services/api/write",
                                    "services/api/stores", "services/fanout/jobs"])
def test_every_folder_says_what_it_holds(folder: str) -> None:
    init = ROOT / folder / "__init__.py"
    assert ast.get_docstring(ast.parse(init.read_text())), f"{init} has no docstring"
