"""Accounts: the owner deletes theirs (``DELETE /v1/me``); a moderator suspends and
unsuspends one (``POST /internal/moderation/users/{user_id}``).

Both hide every post of the account from every reader on the next request (the
'account' entry of the visibility log, migration 0006, then the account copy:
docs/read-path.md, "Hidden accounts"). A suspended user may still read, not write (403);
a deleted user may do nothing (410), and their token never creates the user again.
"""
from __future__ import annotations

from fastapi import APIRouter, Request, Response

from services.api.http.auth import CurrentUser, Moderator
from services.api.http.deps import CommitWait, Pg
from services.api.http.models import AccountModerationOut, AccountModerationRequest, UserIdPath
from services.api.http.problems import (ACCOUNT_DELETED, NOT_FOUND, ProblemError,
                                        problem_responses)
from services.api.stores import accounts
from services.api.visibility.commit_wait import settle

router = APIRouter(tags=["accounts"])


@router.delete("/v1/me", status_code=204, response_class=Response,
               summary="Delete one's account (final: posts hidden, follows, blocks, mutes "
                       "and likes removed)",
               responses=problem_responses(401, 410))
async def delete_me(user: CurrentUser, pool: Pg, request: Request,
                    commit_wait: CommitWait) -> Response:
    async with pool.connection() as conn, conn.transaction():
        await accounts.delete_account(conn, user.user_id)
    request.app.state.known_users.forget(user.user_id)
    await settle(commit_wait)
    return Response(status_code=204)


@router.post("/internal/moderation/users/{user_id}", response_model=AccountModerationOut,
             tags=["moderation"], summary="Suspend or unsuspend an account",
             responses=problem_responses(400, 401, 403, 404, 410, 413, 422))
async def moderate_user(user_id: UserIdPath, body: AccountModerationRequest, moderator: Moderator,
                        pool: Pg, commit_wait: CommitWait) -> AccountModerationOut:
    async with pool.connection() as conn, conn.transaction():
        if body.action == "suspend":
            state = await accounts.suspend(conn, user_id, reason=body.reason,
                                           moderator_id=moderator.user_id)
            if state is None:
                raise ProblemError(NOT_FOUND, "no such user")
        else:
            state = await accounts.unsuspend(conn, user_id)
    if state == accounts.DELETED:
        raise ProblemError(ACCOUNT_DELETED, "this account was deleted")
    if body.action == "suspend":
        await settle(commit_wait)
    return AccountModerationOut(user_id=str(user_id),
                                state="suspended" if body.action == "suspend" else "active",
                                reason=body.reason, moderator_id=str(moderator.user_id))
