"""The folder map of docs/architecture.md, checked: which package may import which.

Every import in the project's Python folders (``services/``, ``deploy/``, ``bench/``,
``tests/``; module level and inside functions, relative ones resolved) is read from the
source, so a new upward or sideways import, or two folders importing each other, fails
here, not in review. So is every call: only the client factories
(``services/shared/clients``) build a Kafka, Cassandra or Postgres client, so no client
misses the settings' TLS, SASL or credentials.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("services.api", "services.cdc", "services.fanout", "services.ranker")
# Every top-level folder holding Python, in the order of the arrows between them: each may
# import those before it, never those after (tests/ import bench/'s harness: its
# hand-built CDC events, its wait for a consumer group; bench/ never imports tests/).
FOLDERS = ("services", "deploy", "bench", "tests")

# package (or module) prefix -> prefixes it must never import (the importer's own package
# excepted).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    # The product stands alone: it is run by deploy/, measured by bench/, tested by tests/.
    "services": ("deploy", "bench", "tests"),
    # Running the product (make run) needs neither the benchmarks nor the tests.
    "deploy": ("bench", "tests"),
    # The benchmarks run without the tests: what both use lives in bench/harness/.
    "bench": ("tests",),
    # Shared code serves every service and knows none of them.
    "services.shared": SERVICES,
    # The rules are pure and stand on nothing else.
    "services.shared.domain": ("services.shared.contracts", "services.shared.worker",
                               "services.shared.stores", "services.shared.settings",
                               "services.shared.clients"),
    # What the parts agree on does not depend on how a process runs or stores.
    "services.shared.contracts": ("services.shared.worker", "services.shared.stores",
                                  "services.shared.clients"),
    "services.shared.stores": ("services.shared.worker", "services.shared.contracts"),
    # The client factories build clients from the settings blocks and know nothing above.
    "services.shared.clients": ("services.shared.worker", "services.shared.contracts",
                                "services.shared.stores"),
    # Each worker owns its data: no service imports another's code...
    "services.cdc": ("services.api", "services.fanout", "services.ranker"),
    "services.ranker": ("services.api", "services.cdc", "services.fanout"),
    "services.fanout": ("services.api", "services.cdc", "services.ranker"),
    # ...and inside the API, the layers point one way: routes -> feed/stream/write/stores;
    # the read use cases (feed) -> copies -> visibility and snapshots, which stand alone.
    "services.api.feed": ("services.api.routes", "services.api.stream", "services.api.http",
                          "services.api.write", "services.api.stores", "services.api.app"),
    # The serving copies (Cassandra, the process's cache of it) serve every reader of them
    # and know none: judged by visibility's rules, storing snapshots in their format.
    "services.api.copies": ("services.api.routes", "services.api.stream", "services.api.http",
                            "services.api.write", "services.api.stores", "services.api.app",
                            "services.api.feed"),
    # The visibility guarantee stands on the log alone: it judges what it is handed.
    "services.api.visibility": ("services.api.routes", "services.api.stream", "services.api.http",
                                "services.api.write", "services.api.stores", "services.api.app",
                                "services.api.feed", "services.api.copies",
                                "services.api.snapshots"),
    # Snapshots, pages and cursors are formats, and a writer handed its store's call.
    "services.api.snapshots": ("services.api.routes", "services.api.stream", "services.api.http",
                               "services.api.write", "services.api.stores", "services.api.app",
                               "services.api.feed", "services.api.copies",
                               "services.api.visibility"),
    # The stream and the writes judge and wait on visibility and copies, never on the read
    # use cases.
    "services.api.stream": ("services.api.routes", "services.api.http", "services.api.write",
                            "services.api.stores", "services.api.app", "services.api.feed"),
    "services.api.write": ("services.api.routes", "services.api.http", "services.api.feed",
                           "services.api.snapshots", "services.api.stream", "services.api.stores",
                           "services.api.app"),
    "services.api.routes.posts": ("services.api.feed",),
    "services.api.routes.social": ("services.api.feed",),
    "services.api.routes.moderation": ("services.api.feed",),
    "services.api.stores": ("services.api.routes", "services.api.http", "services.api.feed",
                            "services.api.copies", "services.api.visibility",
                            "services.api.snapshots", "services.api.stream", "services.api.app"),
    "services.api.http": ("services.api.routes", "services.api.feed", "services.api.copies",
                          "services.api.visibility", "services.api.snapshots",
                          "services.api.stream", "services.api.app"),
}
# No exception. (A returning reader's inbox is rebuilt by the fan-out, on the event the
# API publishes: services/fanout/returning.py.)


def _module(path: Path) -> tuple[str, str]:
    """(module, package) of a source file."""
    dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    if path.name == "__init__.py":
        dotted = dotted.removesuffix(".__init__")
        return dotted, dotted
    return dotted, dotted.rsplit(".", 1)[0]


def sources() -> list[Path]:
    """Every Python file of the project's folders (not the benchmarks' kept results)."""
    return [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))
            if "results" not in p.relative_to(ROOT).parts and "out" not in p.relative_to(ROOT).parts]


def imports() -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every import of the project's own
    packages."""
    found = []
    for path in sources():
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
                      if target.split(".", 1)[0] in FOLDERS]
    return found


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(found: list[tuple[str, str, int]]) -> list[str]:
    bad = []
    for importer, target, line in found:
        rules = [(owner, banned) for owner, banned in FORBIDDEN.items() if _under(importer, owner)]
        for owner, banned in rules:
            for prefix in banned:
                if _under(target, prefix) and not _under(target, owner):
                    bad.append(f"{importer}:{line} imports {target} ({owner} must not import {prefix})")
    return sorted(set(bad))


def test_every_import_follows_the_folder_map() -> None:
    assert violations(imports()) == []


def test_the_checker_sees_relative_and_nested_imports() -> None:
    found = {(importer, target) for importer, target, _ in imports()}
    # relative: services/fanout/app.py's "from .inbox import InboxStore"
    assert ("services.fanout.app", "services.fanout.inbox") in found
    # nested (under TYPE_CHECKING): services/api/copies/bodies.py's "from .serving_cache import"
    assert ("services.api.copies.bodies", "services.api.copies.serving_cache") in found


def test_an_upward_import_is_reported() -> None:
    forged = [("services.shared.clients.cql", "services.fanout.inbox", 7),
              ("services.api.feed.reader", "services.api.copies.store", 9),
              ("services.api.feed.activity", "services.fanout.inbox", 31)]
    assert violations(forged) == ["services.shared.clients.cql:7 imports services.fanout.inbox "
                                "(services.shared must not import services.fanout)"]


def cycles(found: list[tuple[str, str, int]], known: set[str] | None = None) -> list[list[str]]:
    """Import circles among the project's modules (an import of a name inside a module
    counts as an import of that module), as lists of modules, each circle once.
    ``known``: every module (a module that imports nothing of the project's is one too:
    an import of it is not an import of its package)."""
    modules = {m for m, _, _ in found} | (known or set())
    edges: dict[str, set[str]] = {}
    for importer, target, _ in found:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != importer:
            edges.setdefault(importer, set()).add(target)
    seen: set[frozenset[str]] = set()
    out: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for nxt in sorted(edges.get(path[-1], ())):
            if nxt == path[0] and frozenset(path) not in seen:
                seen.add(frozenset(path))
                out.append(path)
            elif nxt not in path and nxt > path[0]:   # each circle from its least module
                walk(path + [nxt])
    for start in sorted(edges):
        walk([start])
    return out


def test_no_import_circles() -> None:
    known = {_module(p)[0] for p in sources()}
    assert cycles([f for f in imports() if f[0].startswith("services.")], known) == []


def test_a_circle_is_reported() -> None:
    forged = [("services.a", "services.b.X", 1), ("services.b", "services.a", 2), ("services.c", "services.a", 3)]
    assert cycles(forged) == [["services.a", "services.b"]]


def folder_imports(found: list[tuple[str, str, int]], folders: dict[str, str]) -> list[tuple[str, str, int]]:
    """``found`` between folders: (importing module's folder, imported module's folder,
    line), an import inside one folder left out. ``folders``: every module -> its folder
    (a package's ``__init__`` is its folder)."""
    out = []
    for importer, target, line in found:
        while target and target not in folders:
            target = target.rpartition(".")[0]
        if target and folders[importer] != folders[target]:
            out.append((folders[importer], folders[target], line))
    return out


def test_no_folders_import_each_other() -> None:
    """No circle between folders either (services/, deploy/, bench/, tests/ and every
    folder in them): a folder and one below it, or two side by side, point one way; what
    both need lives in the lower one."""
    folders = dict(_module(p) for p in sources())
    assert cycles(folder_imports(imports(), folders), set(folders.values())) == []


def test_a_circle_between_folders_is_reported() -> None:
    folders = {"services.fanout": "services.fanout", "services.fanout.app": "services.fanout",
               "services.fanout.jobs.rebuild": "services.fanout.jobs",
               "services.fanout.jobs.repair": "services.fanout.jobs",
               "bench.cdc.debezium": "bench.cdc", "bench.run.report": "bench.run"}
    forged = [("services.fanout.app", "services.fanout.jobs.rebuild.rebuilder", 37),
              ("services.fanout.jobs.repair", "services.fanout.app", 40),
              ("services.fanout.jobs.repair", "services.fanout.jobs.rebuild", 55),
              ("bench.cdc.debezium", "bench.run.report", 38)]
    assert folder_imports(forged, folders) == [("services.fanout", "services.fanout.jobs", 37),
                                               ("services.fanout.jobs", "services.fanout", 40),
                                               ("bench.cdc", "bench.run", 38)]
    assert cycles(folder_imports(forged, folders)) == [["services.fanout", "services.fanout.jobs"]]


def test_an_arrow_back_up_is_reported() -> None:
    forged = [("deploy.demo", "bench.workload", 18), ("services.api.app", "deploy.lag", 3),
              ("bench.run", "deploy.workload", 33), ("tests.unit.test_x", "bench.run.capacity", 5),
              ("bench.fanout.rows", "tests.support.cdc_events", 66)]
    assert violations(forged) == [
        "bench.fanout.rows:66 imports tests.support.cdc_events (bench must not import tests)",
        "deploy.demo:18 imports bench.workload (deploy must not import bench)",
        "services.api.app:3 imports deploy.lag (services must not import deploy)"]


# Where clients may be built: the factories.
CLIENT_FACTORIES = "services/shared/clients/"
# The client libraries, and what in them builds a client (a connection, a pool, a
# producer...): a class or function by its name, or ``Class.method``.
CLIENT_LIBRARIES = ("confluent_kafka", "aiokafka", "kafka", "cassandra", "faust",
                    "psycopg", "psycopg2", "psycopg_pool")
CLIENT_BUILDERS = frozenset({
    "Producer", "Consumer", "AdminClient", "SerializingProducer", "DeserializingConsumer",
    "SchemaRegistryClient", "AIOKafkaProducer", "AIOKafkaConsumer", "AIOKafkaAdminClient",
    "KafkaProducer", "KafkaConsumer", "KafkaAdminClient", "Cluster", "App",
    "connect", "Connection.connect", "AsyncConnection.connect", "PGconn.connect",
    "ConnectionPool", "AsyncConnectionPool", "NullConnectionPool", "AsyncNullConnectionPool",
    "ThreadedConnectionPool", "SimpleConnectionPool"})


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` of a name or attribute chain, else None (a call's result, a subscript)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def client_builds(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every call in ``tree`` that builds a store client: a name that an
    import (anywhere in the file, aliases followed) binds to one of CLIENT_LIBRARIES,
    called as one of CLIENT_BUILDERS (``psycopg.connect``, ``Consumer`` from
    ``confluent_kafka``, ``AsyncConnection.connect``, ``faust.App``...)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        dotted = _dotted(node.func)
        if dotted is None:
            continue
        head, _, rest = dotted.partition(".")
        if head not in bound:
            continue
        resolved = bound[head] + ("." + rest if rest else "")
        parts = resolved.split(".")
        if parts[0] not in CLIENT_LIBRARIES or len(parts) < 2:
            continue
        if parts[-1] in CLIENT_BUILDERS or ".".join(parts[-2:]) in CLIENT_BUILDERS:
            found.append((node.lineno, resolved))
    return found


def test_only_the_client_factories_build_clients() -> None:
    """Every Kafka, Cassandra and Postgres client is built by services/shared/clients,
    from the settings blocks: elsewhere a client would miss TLS, SASL or credentials."""
    offenders = [f"{path.relative_to(ROOT)}:{line} builds {what}()"
                 for path in sources() if not str(path.relative_to(ROOT)).startswith(CLIENT_FACTORIES)
                 for line, what in client_builds(ast.parse(path.read_text(), str(path)))]
    assert not offenders, ("build clients with services.shared.clients (kafka, cql, pg):\n"
                           + "\n".join(offenders))


def test_the_client_check_sees_every_form() -> None:
    code = """
import faust
import psycopg as pq
import psycopg2
from confluent_kafka import Consumer as C
from confluent_kafka.admin import AdminClient
from aiokafka import AIOKafkaProducer
from cassandra.cluster import Cluster
from psycopg import AsyncConnection
from psycopg_pool import ConnectionPool
from services.shared.clients import kafka, pg

def f(settings):
    C({"bootstrap.servers": "x"})
    AdminClient({})
    AIOKafkaProducer(bootstrap_servers="x")
    Cluster(["h"])
    faust.App("id", broker="kafka://x")
    pq.connect("")
    psycopg2.connect("")
    AsyncConnection.connect("")
    pq.AsyncConnection.connect("")
    ConnectionPool("")
    kafka.producer(settings)            # the factories: fine
    pg.connect(settings)
    cluster.connect()                   # a session of a cluster the factory built
    Producer = object
    Producer()                          # not a client library's
"""
    assert client_builds(ast.parse(code)) == [
        (14, "confluent_kafka.Consumer"), (15, "confluent_kafka.admin.AdminClient"),
        (16, "aiokafka.AIOKafkaProducer"), (17, "cassandra.cluster.Cluster"), (18, "faust.App"),
        (19, "psycopg.connect"), (20, "psycopg2.connect"), (21, "psycopg.AsyncConnection.connect"),
        (22, "psycopg.AsyncConnection.connect"), (23, "psycopg_pool.ConnectionPool")]


# One owner per Cassandra table: the module of services/shared/stores holding its
# statements, their columns and row types. A CQL statement naming the table (a string
# literal, an f-string's text) stands there and nowhere else in services/ and deploy/
# (tests/ and bench/ keep their own, as do the migrations). Services make the owner's
# statements (services/shared/stores/statements.py) and run them their own way.
CQL_OWNERS = {
    "posts": "services/shared/stores/posts.py",
    "following": "services/shared/stores/follows.py",
    "followers": "services/shared/stores/follows.py",
    "blocks": "services/shared/stores/blocks.py",
    "post_likes": "services/shared/stores/likes.py",
    "author_tiers": "services/shared/stores/tiers.py",
    "celebrities": "services/shared/stores/tiers.py",
    "fanout_capacity": "services/shared/stores/tiers.py",
    "feed_inbox": "services/shared/stores/inbox.py",
    "author_timeline": "services/shared/stores/timelines.py",
    "follow_edges": "services/shared/stores/counted_edges.py",
    "like_edges": "services/shared/stores/counted_edges.py",
    "reader_preferences": "services/shared/stores/preferences.py",
    "reader_activity": "services/shared/stores/activity.py",
    "readers_by_period": "services/shared/stores/activity.py",
    "inactive_followers": "services/shared/stores/activity.py",
    "activity_sweeps": "services/shared/stores/activity.py",
    "feed_snapshot_slots": "services/shared/stores/snapshot_slots.py",
    "stream_leases": "services/shared/stores/stream_leases.py",
    "account_states": "services/shared/stores/accounts.py",
    "user_profiles": "services/shared/stores/profiles.py",
}
CQL_CHECKED = ("services", "deploy")


def _tables(folder: str, pattern: str) -> list[str]:
    """Tables the migrations of ``folder`` create and do not drop later, in file order."""
    tables: dict[str, None] = {}
    for path in sorted((ROOT / "deploy" / "migrations" / folder).glob(pattern)):
        text = path.read_text()
        for match in re.finditer(r"\b(CREATE|DROP) TABLE (?:IF (?:NOT )?EXISTS )?(\w+)", text, re.IGNORECASE):
            if match.group(1).upper() == "CREATE":
                tables[match.group(2)] = None
            else:
                tables.pop(match.group(2), None)
    return list(tables)


def cassandra_tables() -> list[str]:
    return _tables("cassandra", "*.cql")


def _literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string literal of ``tree`` but docstrings (an f-string as
    its text with ``{}`` for each value)."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    inside_fstrings = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
                       for part in node.values}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            out.append((node.lineno, "".join(p.value if isinstance(p, ast.Constant) else "{}"
                                             for p in node.values)))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docstrings and id(node) not in inside_fstrings):
            out.append((node.lineno, node.value))
    return out


def cql_tables(text: str, tables: list[str], shared: frozenset[str]) -> list[str]:
    """The Cassandra tables a literal's statement names. A name Postgres has too (posts,
    blocks) counts only in CQL: a literal with a bind marker ``?`` (every statement the
    product sends to Cassandra is prepared; psycopg's markers are ``%s``)."""
    return [t for t in tables
            if re.search(rf"\b(?:FROM|INTO|UPDATE|TRUNCATE)\s+{t}\b", text)
            and (t not in shared or "?" in text)]


def cql_offenders(path: str, tree: ast.AST, tables: list[str], shared: frozenset[str]) -> list[str]:
    return [f"{path}:{line} names {table} (its statements live in {CQL_OWNERS.get(table, '?')})"
            for line, text in _literals(tree) for table in cql_tables(text, tables, shared)
            if CQL_OWNERS.get(table) != path]


def test_every_cassandra_table_has_one_owner() -> None:
    """A new table gets its owner module in CQL_OWNERS (and a dropped one leaves it)."""
    assert sorted(cassandra_tables()) == sorted(CQL_OWNERS)
    missing = sorted({p for p in CQL_OWNERS.values() if not (ROOT / p).is_file()})
    assert not missing, missing


def test_cql_names_a_table_only_in_its_owner() -> None:
    tables = cassandra_tables()
    shared = frozenset(tables) & frozenset(_tables("postgres", "*.sql"))
    offenders = [o for path in sources() if path.relative_to(ROOT).parts[0] in CQL_CHECKED
                 for o in cql_offenders(str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path)),
                                        tables, shared)]
    assert not offenders, ("write CQL in the table's owner (services/shared/stores) and use its "
                           "statements:\n" + "\n".join(offenders))


def test_the_cql_check_sees_every_form() -> None:
    code = '''
"""A docstring may say SELECT x FROM following."""
A = "SELECT followed_id FROM following WHERE follower_id=?"
B = ("SELECT direction FROM blocks "
     "WHERE user_id=? AND other_id=?")
C = f"SELECT {cols} FROM posts WHERE post_id IN ?"
D = "SELECT post_id FROM posts WHERE post_id = ANY(%s)"      # Postgres's posts
E = "INSERT INTO blocks (blocker_id, blocked_id) VALUES (3, 2)"  # Postgres's blocks
F = "DELETE FROM feed_inbox USING TIMESTAMP ? WHERE reader_id=?"
G = "SELECT * FROM follows WHERE follower_id = %s"             # no Cassandra table
H = "read from following"                                       # prose
'''
    tables = ["posts", "following", "blocks", "feed_inbox"]
    found = cql_offenders("services/x.py", ast.parse(code), tables, frozenset({"posts", "blocks"}))
    assert sorted(o.split(" (")[0] for o in found) == [
        "services/x.py:3 names following", "services/x.py:4 names blocks",
        "services/x.py:6 names posts", "services/x.py:9 names feed_inbox"]
    # In its owner, a statement is where it belongs.
    assert not [o for o in cql_offenders("services/shared/stores/inbox.py", ast.parse(code), tables,
                                         frozenset({"posts", "blocks"})) if "feed_inbox" in o]


def test_every_python_folder_is_on_the_map() -> None:
    """A new top-level folder of Python gets its place in FOLDERS (and the arrows) first."""
    holding = {p.relative_to(ROOT).parts[0] for p in ROOT.glob("*/**/*.py")
               if not p.relative_to(ROOT).parts[0].startswith(".")}
    assert holding <= set(FOLDERS), sorted(holding - set(FOLDERS))


def packages() -> list[Path]:
    return sorted({p.parent for p in sources()})


@pytest.mark.parametrize("folder", packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_folder_says_what_it_holds(folder: Path) -> None:
    init = folder / "__init__.py"
    assert init.exists(), f"{folder} is not a package"
    assert ast.get_docstring(ast.parse(init.read_text())), f"{init} has no docstring"


def mapped_packages() -> list[Path]:
    """The packages whose docstring lists what they hold: the product's, deploy's, the
    benchmarks' and the tests' helpers (a test folder's modules name themselves)."""
    return [p for p in packages() if p.relative_to(ROOT).parts[0] != "tests"
            or p.relative_to(ROOT).parts[:2] == ("tests", "support")]


@pytest.mark.parametrize("folder", mapped_packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_names_each_module(folder: Path) -> None:
    """Each module and subpackage is named in its package's docstring, so the list stays
    what the folder holds now."""
    tree = ast.parse((folder / "__init__.py").read_text())
    doc = ast.get_docstring(tree) or ""
    held = [p.stem for p in folder.glob("*.py") if not p.name.startswith("__")]
    held += [p.name for p in folder.iterdir() if (p / "__init__.py").exists()]
    unnamed = [name for name in held if not re.search(rf"(?<!\w){re.escape(name)}(?!\w)", doc)]
    assert not unnamed, f"{folder / '__init__.py'} does not name {sorted(unnamed)}"
    # ...and every name a line of the list starts with ("* ``name``: ...") is there: a
    # module, a folder, a file, or something the package itself defines.
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    listed = [name for line in doc.splitlines() if line.startswith("* ")
              for name in re.findall(r"``([\w.-]+?)/?``", line.split(": ")[0])]
    gone = [name for name in listed if name not in defined
            and not ((folder / f"{name}.py").exists() or (folder / name).exists())]
    assert not gone, f"{folder / '__init__.py'} lists what is not there: {sorted(gone)}"


def test_make_run_needs_no_benchmark() -> None:
    """The demo (and everything else ``make run`` starts) imports with ``bench`` and
    ``tests`` unimportable, as from a tree without them."""
    code = ("import sys; sys.modules['bench'] = None; sys.modules['tests'] = None; "
            "import deploy.demo, deploy.services, deploy.migrate, deploy.lag, deploy.stack, deploy.supervise, "
            "services.api.app, services.cdc.relay, services.fanout.app, services.ranker.app")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_demo_is_small_on_three_nodes_unless_told_otherwise():
    from deploy.demo import demo_spec, pick_reader
    from deploy.workload import GraphSpec, generate

    assert demo_spec(1, None) == GraphSpec.demo() == demo_spec(3, "full")
    assert demo_spec(3, None) == GraphSpec.demo_small() == demo_spec(1, "small")
    with pytest.raises(SystemExit, match="FEED_DEMO_SIZE"):
        demo_spec(1, "huge")
    # The small graph still gives its demo reader a first page's worth of authors' posts.
    graph = generate(GraphSpec.demo_small())
    reader = pick_reader(graph)
    followed = {b for a, b in zip(graph.follower.tolist(), graph.followed.tolist()) if a == reader}
    assert sum(1 for post in graph.posts if post[1] in followed) >= 20
