"""Internal moderation: remove or restore a post (tokens with the moderator role only)."""
from __future__ import annotations

from typing import Literal

from fastapi import APIRouter

from services.api.http.auth import Moderator
from services.api.http.deps import CommitWait, Pg
from services.api.http.models import ModerationOut, ModerationRequest, PostIdPath
from services.api.http.problems import NOT_FOUND, ProblemError, problem_responses
from services.api.stores import moderation
from services.api.visibility.commit_wait import settle
from services.shared.domain.rules import REMOVED, VISIBLE

router = APIRouter(prefix="/internal/moderation", tags=["moderation"])

# action -> (posts.visibility, moderation_actions.state)
EFFECTS: dict[str, tuple[int, Literal["removed", "restored"]]] = {
    "remove": (REMOVED, "removed"), "restore": (VISIBLE, "restored")}


@router.post("/posts/{post_id}", response_model=ModerationOut,
             summary="Remove or restore a post",
             responses=problem_responses(400, 401, 403, 404, 413, 422))
async def moderate_post(post_id: PostIdPath, body: ModerationRequest, moderator: Moderator,
                        pool: Pg, commit_wait: CommitWait) -> ModerationOut:
    visibility, state = EFFECTS[body.action]
    async with pool.connection() as conn, conn.transaction():
        updated_at = await moderation.apply(conn, post_id, visibility=visibility, state=state,
                                            reason=body.reason,
                                            moderator_id=moderator.user_id)
    if updated_at is None:
        raise ProblemError(NOT_FOUND, "no such post")
    if body.action == "remove":
        await settle(commit_wait)
    return ModerationOut(post_id=str(post_id), state=state, reason=body.reason,
                         moderator_id=str(moderator.user_id), updated_at=updated_at)
