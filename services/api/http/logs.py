"""Structured JSON logs carrying the request id of the request being served.

``request_id_var`` is set by ``edge.Edge``; every record logged while a
request runs gets it, so one grep for an X-Request-ID finds all lines of that request.
"""
from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import datetime, timezone

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)

# edge.Edge's logger: one INFO line per request when enabled, ERROR for 5xx.
ACCESS_LOGGER = "services.api.access"

# Attributes every LogRecord has; anything else passed via ``extra=`` is emitted as a field.
_STANDARD_ATTRS = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, request_id and any extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(
                timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None) or request_id_var.get()
        if request_id:
            entry["request_id"] = request_id
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and key not in entry and key != "color_message":
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str = "INFO", *, access_log: bool = False) -> None:
    """Route the root logger (and uvicorn's) to stderr as JSON lines.

    Without ``access_log`` the access logger only passes WARNING and above: 5xx responses
    are logged, successful requests are not (a JSON line per request costs CPU on every
    request; metrics count them instead).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.NOTSET if access_log else logging.WARNING)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
