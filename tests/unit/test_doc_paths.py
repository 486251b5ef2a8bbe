"""Every repository path the docs and the code's comments name exists, and they cite
nothing a reader cannot open (a design file kept elsewhere, issue or session numbers).

Read: README.md and the other Markdown pages (docs/, services/, deploy/, schemas/; not
the run records in bench/results/ or docs/reliability/), the comments and docstrings of
services/, deploy/, bench/ (not bench/results/ or bench/out/) and tests/, and the
comments of the Makefile and of SQL, CQL, YAML, env and properties files. A token is
checked when it
- starts with a top-level folder (``services/``, ``deploy/``, ``bench/``, ``tests/``,
  ``docs/``, ``schemas/``, ``.ci/``): that file or folder must exist;
- or is a file name with a known extension, in backticks or not (``fence.py``,
  ``stream/hub.py``): some file of the repository must end with it.
Globs and placeholders (``*``, ``<``, ``{``, ``…``) are not paths.
"""
from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from functools import lru_cache
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
TOP = ("services", "deploy", "bench", "tests", "docs", "schemas", ".ci")
# Made by running things, never in a checkout: the stack's folder, the benchmarks' output,
# the tests' screenshots.
GENERATED = (".stack/", "bench/out/", "tests/artifacts/")
# Run records: they name what existed when they were written.
RECORDS = ("bench/results/", "bench/out/", "docs/reliability/")
# Argument placeholders of usage lines (``--out FILE.json``), not files.
METAVARS = {"FILE", "RESULT", "OUT", "RUN", "DIR"}
# The extensions of the repository's own files (a name ending otherwise, like Kafka's
# server.properties or kafka-topics.sh, belongs to another program).
EXTENSIONS = "py|md|cql|sql|json|yml|yaml|toml|js|css|html"
SKIP_DIRS = {".git", ".venv", ".stack", ".mypy_cache", ".pytest_cache", ".hypothesis", "__pycache__",
             "node_modules"}

ROOTED = re.compile(r"(?<![\w./-])((?:%s)/[\w./*<>{}…,-]*)" % "|".join(re.escape(t) for t in TOP))
NAMED = re.compile(r"(?<![\w./}-])((?:\.stack/)?[\w-]+(?:/[\w.-]+)*\.(?:%s))(?![\w/])" % EXTENSIONS)
PLACEHOLDER = re.compile(r"[*<{…]")
BROKEN = re.compile(r"[\w.-]/$")


@lru_cache(maxsize=1)
def repo_files() -> frozenset[str]:
    found: set[str] = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith((".egg-info", "-data"))]
        found.update((Path(folder) / f).relative_to(ROOT).as_posix() for f in files)
    return frozenset(found)


@lru_cache(maxsize=1)
def repo_folders() -> frozenset[str]:
    return frozenset(p.as_posix() for f in repo_files() for p in Path(f).parents if p.as_posix() != ".")


def markdown_lines(path: Path) -> Iterator[tuple[int, str]]:
    yield from enumerate(path.read_text().splitlines(), 1)


def python_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The comments and docstrings of a module, with their line numbers."""
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                for offset, line in enumerate(first.value.value.splitlines()):
                    yield first.lineno + offset, line
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def comment_lines(path: Path, mark: str) -> Iterator[tuple[int, str]]:
    """The comments of a SQL or CQL file (``--``), or of a YAML, env or properties file (``#``)."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if mark in line:
            yield number, line[line.index(mark):]


def texts() -> Iterator[tuple[str, int, str]]:
    for name in sorted(repo_files()):
        if name.startswith(RECORDS):
            continue
        path = ROOT / name
        if name.endswith(".md") and (name == "README.md" or name.startswith(TOP)):
            lines = markdown_lines(path)
        elif name.endswith(".py") and name.startswith(("services/", "deploy/", "bench/", "tests/")):
            lines = python_lines(path)
        elif name.endswith((".sql", ".cql")):
            lines = comment_lines(path, "--")
        elif name in ("Makefile", ".ci/run") or (name.endswith((".yml", ".yaml", ".env", ".properties"))
                                                 and name.startswith(TOP)):
            lines = comment_lines(path, "#")
        else:
            continue
        numbered = dict(lines)
        for number, line in numbered.items():
            # A path wrapped after a "/" continues on the next line.
            if BROKEN.search(line) and number + 1 in numbered:
                line += numbered[number + 1].lstrip(" #-*").split(" ")[0]
            yield name, number, line


def rooted_exists(token: str) -> bool:
    path = token.rstrip("/")
    return path in repo_files() or path in repo_folders()


def named_exists(token: str) -> bool:
    if "/" not in token:
        return any(Path(f).name == token for f in repo_files())
    return any(f == token or f.endswith("/" + token) for f in repo_files())


def missing(line: str) -> list[str]:
    out: list[str] = []
    for match in ROOTED.finditer(line):
        token = match.group(1).rstrip(".,:;)")
        if PLACEHOLDER.search(token) or token.startswith(GENERATED):
            continue
        if not rooted_exists(token):
            out.append(token)
    for match in NAMED.finditer(line):
        token = match.group(1)
        if token.startswith(TOP) or token.startswith(GENERATED) or token.split(".")[0] in METAVARS:
            continue
        if not named_exists(token):
            out.append(token)
    return out


def test_every_named_path_exists() -> None:
    stale = [f"{name}:{number}: {token}" for name, number, line in texts() for token in missing(line)]
    assert not stale, "paths that do not exist:\n" + "\n".join(stale)


# What a reader of the repository cannot open: a design file kept elsewhere, an issue
# tracker's numbers, a working session's label. Cite the docs/ page, the figure, the date.
UNREADABLE = re.compile(r"DESIGN\.md|issue [0-9]+|\bs[0-9]{2}\b|seed section")


def test_no_citation_of_what_the_repository_does_not_hold() -> None:
    cited = [f"{name}:{number}: {line.strip()}" for name, number, line in texts()
             if UNREADABLE.search(line)]
    assert not cited, "citations a reader cannot follow:\n" + "\n".join(cited)


def test_the_check_finds_what_it_should() -> None:
    assert missing("see services/api/visibility/fence.py and `fence.py`") == []
    assert missing("the stack writes `.stack/data/x.yml`; bench/out/read-grid/ holds it") == []
    assert missing("tests/integration/test_cdc_*.py, docs/{cdc,fanout}.md, schemas/<topic>") == []
    assert missing("--out FILE.json") == []
    assert missing("deploy/stack.py, `nowhere.py` and feed/gone.py") == ["deploy/stack.py", "nowhere.py",
                                                                          "feed/gone.py"]
