"""``OneWrite`` and ``OneWriteProtocol`` (services/api/http/one_write.py) over real
sockets: a turn's writes reach the peer as one write, in order, and nothing held is lost
at a close; uvicorn serving with the protocol answers byte for byte as before, keep-alive
and ``Connection: close`` alike."""
from __future__ import annotations

import asyncio
import socket

import uvicorn

from services.api.http.one_write import OneWrite, OneWriteProtocol


class _Sink(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None


class _Counting:
    """The real transport, with its ``write`` calls recorded (what reaches the socket)."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self._transport.write(data)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


async def _pair() -> tuple[_Counting, socket.socket]:
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_accepted_socket(_Sink, ours)
    return _Counting(transport), peer


async def _read_all(peer: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    out = b""
    while chunk := await loop.sock_recv(peer, 65536):
        out += chunk
    return out


def test_the_writes_of_one_turn_leave_as_one_write_in_order() -> None:
    async def run() -> tuple[list[bytes], bytes]:
        real, peer = await _pair()
        wrapped = OneWrite(real, asyncio.get_running_loop())  # type: ignore[arg-type]
        wrapped.write(b"HTTP/1.1 200 OK\r\n\r\n")
        wrapped.writelines([b"{", bytearray(b'"a"'), memoryview(b":1}")])
        wrapped.write(b"")
        assert real.writes == []  # held until the turn ends
        assert wrapped.get_write_buffer_size() == len(b'HTTP/1.1 200 OK\r\n\r\n{"a":1}')
        await asyncio.sleep(0)
        writes = list(real.writes)
        wrapped.close()
        received = await _read_all(peer)
        peer.close()
        return writes, received

    writes, received = asyncio.run(run())
    assert writes == [b'HTTP/1.1 200 OK\r\n\r\n{"a":1}']
    assert received == b'HTTP/1.1 200 OK\r\n\r\n{"a":1}'


def test_a_close_writes_what_is_held_first_and_an_abort_drops_it() -> None:
    async def run() -> tuple[bytes, list[bytes], bytes]:
        real, peer = await _pair()
        wrapped = OneWrite(real, asyncio.get_running_loop())  # type: ignore[arg-type]
        wrapped.write(b"last words")
        wrapped.close()  # in the same turn as the write
        closed = await _read_all(peer)
        peer.close()

        real2, peer2 = await _pair()
        aborted = OneWrite(real2, asyncio.get_running_loop())  # type: ignore[arg-type]
        aborted.write(b"never sent")
        aborted.abort()
        await asyncio.sleep(0)  # the flush scheduled by the write finds nothing
        dropped = await _read_all(peer2)
        peer2.close()
        return closed, real2.writes, dropped

    closed, writes_after_abort, dropped = asyncio.run(run())
    assert closed == b"last words"
    assert writes_after_abort == [] and dropped == b""


def test_uvicorn_with_the_protocol_answers_as_before_keep_alive_and_close() -> None:
    body = b'{"items":[],"next_cursor":null}'

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def run() -> tuple[bytes, bytes]:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, http=OneWriteProtocol,
                                lifespan="off", log_level="warning", access_log=False)
        server = uvicorn.Server(config)
        task = asyncio.ensure_future(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # Two requests pipelined on one connection, the second asking to close it.
        writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await writer.drain()
        both = await asyncio.wait_for(reader.read(), timeout=10)  # until the server closes
        writer.close()
        reader2, writer2 = await asyncio.open_connection("127.0.0.1", port)
        writer2.write(b"GET /c HTTP/1.0\r\n\r\n")  # HTTP/1.0: closed after the response
        await writer2.drain()
        one = await asyncio.wait_for(reader2.read(), timeout=10)
        writer2.close()
        server.should_exit = True
        await task
        return both, one

    both, one = asyncio.run(run())
    responses = both.split(b"HTTP/1.1 200 OK\r\n")
    assert responses[0] == b"" and len(responses) == 3
    for response in responses[1:]:
        assert response.endswith(b"\r\n\r\n" + body)
        assert b"content-length: %d\r\n" % len(body) in response
    assert b"connection: close\r\n" in responses[2]
    assert one.startswith(b"HTTP/1.1 200 OK\r\n") and one.endswith(b"\r\n\r\n" + body)
