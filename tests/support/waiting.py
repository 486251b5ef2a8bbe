"""Waiting for a condition with a deadline: the one polling helper of the tests."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(condition: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.02,
               message: str = "condition") -> Any:
    """Poll ``condition()`` until it is truthy and return what it returned; fail with
    ``message`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)
