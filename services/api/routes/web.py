"""The feed page at ``/`` (static HTML, CSS and JavaScript; no build step) and, in
development mode only, ``POST /dev/token`` for the page's "mint a token" button.

The page talks to the same public API as any client (``/v1/...`` with a bearer token);
it adds no endpoint a production deployment serves except the static files. The token
route exists only while ``FEED_DEV_MODE`` is set, the flag that also lets the API run on
the built-in development secrets (services/shared/secret_policy.py): otherwise 404.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field

from services.api.http.auth import mint_token
from services.api.http.problems import NOT_FOUND, ProblemError, problem_responses

WEB = Path(__file__).resolve().parents[1] / "web"
# A page session's token: a working day.
DEV_TOKEN_TTL_S = 12 * 3600

router = APIRouter(tags=["web"])


@router.get("/", include_in_schema=False)
async def page() -> FileResponse:
    return FileResponse(WEB / "index.html", media_type="text/html",
                        headers={"Cache-Control": "no-cache"})


class DevTokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # A decimal string (ids are strings in every JSON body): 1 to 9222999999999999999, the
    # positive 64-bit range less its top 0.004 %, so the pattern alone says what is valid.
    user_id: Annotated[str, Field(pattern=r"^(?:[1-9][0-9]{0,17}|[1-8][0-9]{18}|9[01][0-9]{17}"
                                          r"|92[01][0-9]{16}|922[0-2][0-9]{15})$",
                                  description="decimal user id")]


class DevTokenOut(BaseModel):
    token: str
    user_id: str
    expires_in: int


@router.post("/dev/token", response_model=DevTokenOut,
             summary="A development token for a user id (development mode only)",
             responses=problem_responses(400, 404, 422))
async def dev_token(request: Request, body: DevTokenRequest) -> DevTokenOut:
    settings = request.app.state.settings
    if not settings.dev_mode:
        raise ProblemError(NOT_FOUND, "tokens are minted here only in development mode")
    token = mint_token(int(body.user_id), settings.jwt_secret.get_secret_value(),
                       ttl_seconds=DEV_TOKEN_TTL_S, issuer=settings.jwt_issuer,
                       audience=settings.jwt_audience)
    return DevTokenOut(token=token, user_id=body.user_id, expires_in=DEV_TOKEN_TTL_S)
