"""``python -m bench`` lists every benchmark that can be run."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from bench.__main__ import INDEX

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _runnable() -> set[str]:
    """What ``python -m`` runs in bench/: each package with a ``__main__.py`` (by the package's
    name), and each other module with a ``__main__`` block that no such package runs."""
    packages, modules, shimmed = set(), set(), set()
    for path in BENCH.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if "results" in rel.parts or "out" in rel.parts or path == BENCH / "__main__.py":
            continue
        dotted = ".".join(rel.with_suffix("").parts)
        tree = ast.parse(path.read_text())
        if path.name == "__main__.py":
            packages.add(dotted.removesuffix(".__main__"))
            shimmed |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        elif any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body):
            modules.add(dotted)
    return packages | (modules - shimmed)


def test_every_runnable_benchmark_is_listed() -> None:
    listed = {m for rows in INDEX.values() for command, _ in rows
              for m in re.findall(r"\b(bench(?:\.\w+)+)", command)}
    assert _runnable() == listed, (sorted(_runnable() - listed), sorted(listed - _runnable()))


def test_python_m_bench_prints_the_index() -> None:
    done = subprocess.run([sys.executable, "-m", "bench"], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "make bench-read" in done.stdout and "python -m bench.run.capacity" in done.stdout
