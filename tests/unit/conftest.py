"""Fixtures shared by the unit tests."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import pytest

from deploy.stack.layout import Layout


@pytest.fixture
def stack_layout(tmp_path: Path) -> Callable[[int], Layout]:
    """A stack layout of 1 or 3 nodes (deploy/stack/layout.py) rooted in the test's own
    directory, so nothing is written beside a real stack."""
    return lambda nodes: dataclasses.replace(Layout.from_env(nodes=nodes), root=tmp_path)
