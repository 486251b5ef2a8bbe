"""The HTTP/1.1 protocol the API serves with: uvicorn's httptools protocol, with the writes
of one turn of the event loop sent as one.

uvicorn writes a response's status line and headers when the app sends
``http.response.start``, and its body when the app sends ``http.response.body``: two
``send()`` calls on the socket for every page, although the app sends both in one turn
of the loop. On loopback and on a LAN the kernel's TCP path is most of a send's cost
(py-spy under wrk: the two writes were 8-15 % of the API's CPU per page, 2026-12-06), so
each response here leaves in one ``send()``: ``OneWrite`` keeps what is written during a
turn and writes it, joined, at the start of the next (``loop.call_soon``), or at once
when the connection is closed. Bytes and their order are exactly uvicorn's; a streamed
response (the SSE route) still leaves each event in the turn after it is sent.

``OneWriteProtocol`` is passed to uvicorn as its ``http`` protocol class (``http=``, an
import string for the worker processes: ``PROTOCOL``).
"""
from __future__ import annotations

import asyncio
from typing import Any, Iterable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

PROTOCOL = "services.api.http.one_write:OneWriteProtocol"


class OneWrite:
    """A transport whose writes of one loop turn go to the socket as one write. Anything
    else is the wrapped transport's; ``close``, ``write_eof`` and
    ``get_write_buffer_size`` count what is held, and ``abort`` drops it as the transport
    drops its own buffer."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(bytes(data))

    def writelines(self, lines: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Write what is held, as one write (nothing once the transport is closing)."""
        held, self._held = self._held, []
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = []
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._held))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's ``HttpToolsProtocol`` writing through ``OneWrite``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(OneWrite(transport, self.loop))  # type: ignore[arg-type]
