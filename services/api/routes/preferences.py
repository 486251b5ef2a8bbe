"""``GET|PUT /v1/me/preferences``: the caller's own feed preferences.

Today one: ``feed_order``, the order a first page of ``GET /v1/feed`` uses when the
request names none (services/api/feed/preferences.py keeps it).
"""
from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from services.api.http.auth import CurrentUser
from services.api.http.problems import UNAVAILABLE, ProblemError, problem_responses

from .feed import FeedOrder, feed_reader

router = APIRouter(prefix="/v1/me", tags=["preferences"])


class Preferences(BaseModel):
    model_config = ConfigDict(extra="forbid")

    feed_order: FeedOrder = Field(description="The feed's order when a request names none: "
                                              "ranked (the default) or latest first")


@router.get("/preferences", response_model=Preferences,
            responses=problem_responses(401, 503))
async def get_preferences(request: Request, user: CurrentUser) -> Preferences:
    """The caller's preferences (defaults for what was never set)."""
    preferences = feed_reader(request).preferences
    try:
        order = await preferences.feed_order(user.user_id)
    except Exception as exc:  # noqa: BLE001 - a timeout or an unreachable node
        raise ProblemError(UNAVAILABLE, "preferences could not be read",
                           headers={"Retry-After": "1"}) from exc
    return Preferences(feed_order=order)  # type: ignore[arg-type]


@router.put("/preferences", response_model=Preferences,
            responses=problem_responses(400, 401, 422, 503))
async def put_preferences(request: Request, user: CurrentUser, body: Preferences) -> Preferences:
    """Store the caller's preferences; the next first page uses them."""
    preferences = feed_reader(request).preferences
    try:
        await preferences.set_feed_order(user.user_id, body.feed_order)
    except Exception as exc:  # noqa: BLE001 - a timeout or an unreachable node
        raise ProblemError(UNAVAILABLE, "preferences could not be stored",
                           headers={"Retry-After": "1"}) from exc
    return body
