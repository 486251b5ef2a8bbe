"""Owner of the read path's copy of user names: ``user_profiles``.

Table (0014_user_profiles.cql): ``user_profiles (user_id) -> handle, display_name``, a
copy of Postgres ``users``' columns of the same names, written by the fan-out from the
users CDC topic at the change's LSN (``USING TIMESTAMP``), read by the API in ``IN``
reads of a page's authors (services/api/copies/names.py).
"""
from __future__ import annotations

from typing import NamedTuple

from .statements import Cql, Statements


class ProfileRow(NamedTuple):
    """``ProfileReads.names_in``."""

    user_id: int
    handle: str | None
    display_name: str | None


class ProfileReads(Statements):
    """The API's read: the names of several users (those with a row)."""

    # (list of user ids,)
    names_in = Cql("SELECT user_id, handle, display_name FROM user_profiles WHERE user_id IN ?")


class FanoutProfiles(Statements):
    """The fan-out's writes, at the change's LSN."""

    # (user_id, handle, display_name, lsn): a null cell is written as null (a name cleared)
    write = Cql("INSERT INTO user_profiles (user_id, handle, display_name) VALUES (?,?,?) "
                "USING TIMESTAMP ?")
    # (lsn, user_id)
    delete = Cql("DELETE FROM user_profiles USING TIMESTAMP ? WHERE user_id=?")
