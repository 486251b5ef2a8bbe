"""Account changes (Postgres's ``account_states``, migration 0006): the read path's
account copy.

A suspension or a deletion writes the account's row in Cassandra's ``account_states``
(services/shared/stores/accounts.py) ``USING TIMESTAMP <lsn>``; an unsuspend (the row's
delete) deletes it at its LSN. Once the row is there, every page hides the author's
posts without the visibility log's 'account' entry, which the verifier then releases.
Each write or delete (the verifier's repairs too) is followed by a serving-changes notice
naming the user (``accounts``): API processes drop the state they keep of them, so an
unsuspend shows the posts again on the next page after it (services/api/copies/accounts.py).

Nothing is purged here: a suspension is lifted by an unsuspend, and the rows of a
suspended author stay in inboxes, hidden when a page is read (as a mute's are). The
inbox rows of a deleted account go with its follows: the deletion removes them in its
own transaction, and each removal reaches the follows handler as an unfollow, which
purges the author's posts from that follower's inbox (relation_events.py).
"""
from __future__ import annotations

from datetime import datetime, timezone

from cassandra.cluster import Session

from services.shared.contracts.envelope import ChangeRecord, parse_timestamp, require_int
from services.shared.contracts.serving_changes import NO_NOTICES, ChangeSink, ServingChange
from services.shared.stores.accounts import AccountRow, FanoutAccounts
from services.shared.stores.cql_async import CqlRunner


class AccountCopy:
    """Writes, deletes and reads the account copy (the handler's and the verifier's); a
    notice follows each acknowledged write or delete."""

    def __init__(self, session: Session, runner: CqlRunner, notices: ChangeSink = NO_NOTICES) -> None:
        self._statements = FanoutAccounts(session)
        self._run = runner
        self._notices = notices

    async def write(self, user_id: int, state: str, changed_at: datetime | None, lsn: int) -> None:
        await self._run.execute(self._statements.write, (user_id, state, changed_at, lsn))
        await self._notices.changed(ServingChange(accounts=(user_id,)))

    async def delete(self, user_id: int, lsn: int) -> None:
        await self._run.execute(self._statements.delete, (lsn, user_id))
        await self._notices.changed(ServingChange(accounts=(user_id,)))

    async def state(self, user_id: int) -> str | None:
        """The copy's state of the account; None: no row (not hidden)."""
        rows = await self._run.execute(self._statements.state, (user_id,))
        return AccountRow._make(rows[0]).state if rows else None


class AccountChanges:
    def __init__(self, copy: AccountCopy) -> None:
        self._copy = copy

    async def on_account_changed(self, change: ChangeRecord) -> None:
        row = change.row
        user_id = require_int(row, "user_id")
        if change.is_delete:
            await self._copy.delete(user_id, change.lsn)
            return
        state = str(row.get("state") or "")
        if not state:
            raise ValueError("account_states row without a state")
        changed_at = parse_timestamp(row.get("changed_at")) or datetime.now(timezone.utc)
        await self._copy.write(user_id, state, changed_at, change.lsn)
