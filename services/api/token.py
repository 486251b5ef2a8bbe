"""``python -m services.api.token <user_id> [--moderator] [--ttl SECONDS]``: a dev token.

Signed with FEED_JWT_SECRET, so it is accepted by an API running with the same settings.
"""
from __future__ import annotations

import argparse

from services.api.http.auth import MODERATOR_ROLE, mint_token, parse_user_id
from services.shared.settings import ApiProcess, load


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.api.token",
                                     description="Print a development bearer token.")
    parser.add_argument("user_id", help="decimal user id (1..2**63-1)")
    parser.add_argument("--moderator", action="store_true", help="add the moderator role")
    parser.add_argument("--ttl", type=int, default=24 * 3600, help="lifetime in seconds")
    args = parser.parse_args(argv)
    try:
        user_id = parse_user_id(args.user_id)
    except ValueError as exc:
        parser.error(str(exc))
    roles = (MODERATOR_ROLE,) if args.moderator else ()
    settings = load(ApiProcess)
    print(mint_token(user_id, settings.jwt_secret.get_secret_value(), roles=roles, ttl_seconds=args.ttl,
                     issuer=settings.jwt_issuer, audience=settings.jwt_audience))


if __name__ == "__main__":
    main()
