"""How a Cassandra table's owner states its statements: ``Cql`` and ``Statements``.

Every table of the serving store has ONE owner module in this package (the layout test,
tests/unit/test_layout.py, holds every CQL literal naming a table to it): the CQL text,
the columns each statement selects and the row type they come back as. A service never
writes CQL: it makes the owner's ``Statements`` (the set for its use, prepared for its
session) and runs them its own way (a ``CqlRunner``, the read path's hedged reads, a
write coalescer, a coalesced ``IN`` read); what a service adds is how it runs them.

A set is declared once, as class attributes::

    class BlockReads(Statements):
        between = Cql("SELECT direction FROM blocks WHERE user_id=? AND other_id=?")

``BlockReads.between.text`` is the CQL; ``BlockReads(session).between`` the statement
prepared for that session (``session.prepare`` waits for the node: make sets where the
other statements were made, at start-up, never on a request's path). A paged statement
(``paged=True``) takes the page size its user gives the set (``page=``); ``fetch_size``
fixes one. The prepared statements are plain attributes of the instance: reading one
costs what reading any attribute does.
"""
from __future__ import annotations

from typing import Any, Iterator, overload

from cassandra.cluster import Session
from cassandra.query import PreparedStatement


class Cql:
    """One statement: its text, and how many rows a page of it holds."""

    __slots__ = ("text", "paged", "fetch_size", "name")

    def __init__(self, text: str, *, paged: bool = False, fetch_size: int | None = None) -> None:
        self.text = text
        self.paged = paged            # pages of the size the set's user gives (``page=``)
        self.fetch_size = fetch_size  # a size of its own (None: the session's default)
        self.name = ""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Cql: ...
    @overload
    def __get__(self, instance: Statements, owner: type[Any]) -> PreparedStatement: ...

    def __get__(self, instance: Statements | None, owner: type[Any]) -> Cql | PreparedStatement:
        if instance is None:
            return self
        # Only reached before the set's __init__ stored the prepared statement.
        raise AttributeError(f"{owner.__name__}.{self.name} is not prepared yet")

    def __repr__(self) -> str:
        return f"Cql({self.text!r})"


class Statements:
    """A set of an owner's statements, prepared for one session when made."""

    def __init__(self, session: Session, *, page: int | None = None) -> None:
        for cql in self.cqls():
            statement = session.prepare(cql.text)
            fetch_size = page if cql.paged and page is not None else cql.fetch_size
            if fetch_size is not None:
                statement.fetch_size = fetch_size
            # An instance attribute: found before the (non-data) descriptor, no call.
            self.__dict__[cql.name] = statement

    @classmethod
    def cqls(cls) -> Iterator[Cql]:
        """The set's statements, in the order they are declared."""
        found: dict[str, Cql] = {}
        for klass in reversed(cls.__mro__):  # a subclass's statement replaces its base's
            found.update((name, value) for name, value in vars(klass).items() if isinstance(value, Cql))
        yield from found.values()
