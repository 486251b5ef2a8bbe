"""Owner of the account copy: ``account_states``.

Table (0013_account_states.cql): ``account_states (user_id) -> state, changed_at``, one
row per account hidden from everyone (``suspended`` or ``deleted``; Postgres's
``account_states``, migration 0006), written and deleted by the fan-out ``USING
TIMESTAMP <lsn>`` from the account_states CDC topic; repaired by the verifier.

- ``ReadPathAccounts``: the API's read of the hidden accounts among some authors.
- ``FanoutAccounts``: the fan-out's write and delete, and the copy audit's read.
"""
from __future__ import annotations

from typing import NamedTuple

from .statements import Cql, Statements

SUSPENDED, DELETED = "suspended", "deleted"


class AccountRow(NamedTuple):
    """A hidden account: its id and state."""

    user_id: int
    state: str | None


class ReadPathAccounts(Statements):
    """The rows of the hidden accounts among ``user_id IN ?``."""

    hidden_in = Cql("SELECT user_id, state FROM account_states WHERE user_id IN ?")


class FanoutAccounts(Statements):
    # (user_id, state, changed_at, lsn)
    write = Cql("INSERT INTO account_states (user_id, state, changed_at) VALUES (?,?,?) USING TIMESTAMP ?")
    # (lsn, user_id)
    delete = Cql("DELETE FROM account_states USING TIMESTAMP ? WHERE user_id=?")
    # (user_id,)
    state = Cql("SELECT user_id, state FROM account_states WHERE user_id=?")
