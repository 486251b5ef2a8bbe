"""``python -m services.api``: serve the API with uvicorn on FEED_API_HOST:FEED_API_PORT."""
from __future__ import annotations

import uvicorn

from services.common.settings import get_settings

from .app import create_app
from .logs import configure_logging


def main() -> None:
    configure_logging()
    settings = get_settings()
    # access_log off: RequestContextMiddleware writes one JSON line per request instead.
    uvicorn.run(create_app(settings), host=settings.api_host, port=settings.api_port,
                log_config=None, access_log=False)


if __name__ == "__main__":
    main()
