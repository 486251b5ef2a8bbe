"""Rank-feature events (``<prefix>.rank-features``; schemas/rank-features.*.v1.json). Pure.

Other services publish ``{"post_id": "<id>", "features": {"<name>": <number>},
"event_time": "<ISO-8601>"}`` keyed by post_id. Each feature is stored in the post
copy's ``features`` map ``USING TIMESTAMP <event_time in µs>``: per feature, the latest
event wins whatever order the events arrive in, and a replay changes nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from services.shared.contracts.envelope import (MalformedEnvelope, id_string, json_object,
                                                parse_timestamp)

# Names are short identifiers; a bound keeps one bad producer from bloating a post row.
MAX_FEATURES_PER_EVENT = 64
MAX_NAME_LENGTH = 64


@dataclass(frozen=True)
class FeaturesObserved:
    post_id: int
    features: dict[str, float]
    event_time: datetime

    @property
    def write_timestamp_us(self) -> int:
        return int(self.event_time.timestamp() * 1_000_000)


def parse_feature_event(raw_value: bytes | str | None) -> FeaturesObserved | None:
    """Parse one rank-features message; ``None`` for a null value. Raises MalformedEnvelope."""
    value = json_object(raw_value, "rank-features value")
    if value is None:
        return None
    post_id = id_string(value, "post_id")
    features = value.get("features")
    if not isinstance(features, dict) or not features or len(features) > MAX_FEATURES_PER_EVENT:
        raise MalformedEnvelope("features must be a non-empty object of at most "
                                f"{MAX_FEATURES_PER_EVENT} entries")
    clean: dict[str, float] = {}
    for name, number in features.items():
        if not name or len(name) > MAX_NAME_LENGTH:
            raise MalformedEnvelope(f"bad feature name {name!r}")
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            raise MalformedEnvelope(f"feature {name} must be a finite number, got {number!r}")
        clean[name] = float(number)
    event_time = parse_timestamp(value.get("event_time"))
    if event_time is None:
        raise MalformedEnvelope("event_time is required")
    return FeaturesObserved(post_id, clean, event_time)
