"""The docs name only variables something reads, and docs/deploy.md lists every setting.

A ``FEED_*`` name in README.md, docs/ (not the run records under docs/reliability/), the
Makefile or deploy/ must be read by a setting (``env_names(Settings)``: ``_FILE`` forms
included; an old ``FEED_FEED_*`` name only on a line that says it is old) or by an
``os.environ`` read in services/, deploy/, bench/ or tests/ (the stack's ports and
folders, the bench's and tests' switches).
"""
from __future__ import annotations

import re
from pathlib import Path

from services.shared.settings import Settings, env_names
from services.shared.settings.base import LEGACY_PREFIX, PREFIX

REPO = Path(__file__).resolve().parents[2]
# A whole name: a pattern such as FEED_PG_* or FEED_<NAME>_FILE is not one.
NAME = re.compile(r"\bFEED_[A-Z0-9_]+(?![A-Za-z0-9_*<{])")
# A name read from the environment: os.environ.get("X"), os.environ["X"], setdefault,
# pop, os.getenv, and helpers named _env_* (deploy/stack/layout.py's _env_int).
READ = re.compile(r"""(?:environ\.get|environ\.setdefault|environ\.pop|environ\[|getenv|\b_env_\w+)"""
                  r"""\(?\s*["'](FEED_[A-Z0-9_]+)["']""")
# Words that mark a line as speaking of the old FEED_FEED_* names.
OLD = re.compile(r"\b(old|legacy|deprecated|formerly|one (more )?release|renamed?)\b", re.I)
TEXT_SUFFIXES = {".md", ".env", ".py", ".yml", ".yaml", ".mk", ".txt", ".toml", ".cfg", ".ini", ".sh"}


def documents() -> list[Path]:
    docs = [p for p in (REPO / "docs").rglob("*.md")
            if not p.relative_to(REPO / "docs").parts[0] == "reliability"]
    deploy = [p for p in (REPO / "deploy").rglob("*") if p.is_file()
              and (p.suffix in TEXT_SUFFIXES or p.name.startswith("Makefile"))]
    return [REPO / "README.md", REPO / "Makefile", *docs, *deploy]


def environ_reads() -> set[str]:
    names: set[str] = set()
    for top in ("services", "deploy", "bench", "tests"):
        for path in (REPO / top).rglob("*.py"):
            names.update(READ.findall(path.read_text(errors="replace")))
    return names


def test_every_documented_variable_is_read() -> None:
    settings = set(env_names(Settings))
    known = settings | environ_reads()
    unknown: list[str] = []
    for path in documents():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for name in NAME.findall(line):
                if name in known:
                    continue
                if (name.startswith(LEGACY_PREFIX) and PREFIX + name[len(LEGACY_PREFIX):] in settings
                        and OLD.search(line)):
                    continue
                unknown.append(f"{path.relative_to(REPO)}:{number}: {name}")
    assert not unknown, "variables nothing reads:\n" + "\n".join(unknown)


def test_deploy_doc_lists_every_setting() -> None:
    text = (REPO / "docs" / "deploy.md").read_text()
    listed = set(re.findall(r"`(FEED_[A-Z0-9_]+)`", text))
    missing = sorted(set(env_names(Settings)) - listed)
    assert not missing, ("docs/deploy.md lacks (regenerate its table with "
                         "`python -m services.shared.settings`): " + ", ".join(missing))
