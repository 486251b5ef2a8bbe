"""A target's verdict, computed from the measured value (never written by hand): what every
benchmark's report states against its targets."""
from __future__ import annotations


def verdict(value: float | None, op: str, limit: float) -> str:
    """"met" or "**missed**" from a measured value against its target (``<=`` or ``>=``);
    "n/a" when nothing was measured."""
    if value is None or value != value:
        return "n/a"
    ok = value <= limit if op == "<=" else value >= limit
    return "met" if ok else "**missed**"


def all_of(*verdicts: str) -> str:
    if "**missed**" in verdicts:
        return "**missed**"
    return "n/a" if "n/a" in verdicts else "met"
