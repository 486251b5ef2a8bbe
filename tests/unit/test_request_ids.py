"""Request ids: a per-process random prefix and a counter, unique without a syscall each."""
from __future__ import annotations

import os
import re

import pytest

from services.api.http.request_context import RequestIdSource, choose_request_id

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def test_generated_ids_are_32_lowercase_hex_like_the_uuid4_hex_they_replace() -> None:
    ids = RequestIdSource()
    assert all(HEX32.match(ids.next_id()) for _ in range(1000))
    assert HEX32.match(choose_request_id(None))


def test_ids_of_one_process_never_repeat() -> None:
    ids = RequestIdSource()
    issued = [ids.next_id() for _ in range(100_000)]
    assert len(set(issued)) == len(issued)


def test_an_id_is_the_process_prefix_then_a_counter() -> None:
    ids = RequestIdSource("00112233445566ff")
    assert [ids.next_id() for _ in range(3)] == [
        "00112233445566ff0000000000000000",
        "00112233445566ff0000000000000001",
        "00112233445566ff0000000000000002",
    ]


def test_separate_processes_and_restarts_draw_different_prefixes() -> None:
    # Each process (and each restart) builds its own source from os.urandom.
    prefixes = {RequestIdSource().prefix for _ in range(1000)}
    assert len(prefixes) == 1000
    first, second = RequestIdSource(), RequestIdSource()
    assert not {first.next_id() for _ in range(100)} & {second.next_id() for _ in range(100)}


def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    parent_id = choose_request_id(None)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave without running pytest's exit
        os.close(read_end)
        os.write(write_end, choose_request_id(None).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        child_id = pipe.read().decode()
    os.waitpid(pid, 0)
    assert HEX32.match(child_id)
    assert child_id[:16] != parent_id[:16]


def test_reseeding_with_a_malformed_prefix_is_refused() -> None:
    with pytest.raises(ValueError):
        RequestIdSource("not-hex")


def test_an_acceptable_client_request_id_is_kept_and_an_unsafe_one_replaced() -> None:
    assert choose_request_id("req-123.abc") == "req-123.abc"
    assert HEX32.match(choose_request_id("x" * 500))
    assert HEX32.match(choose_request_id("bad id\r\nInjected: 1"))
    assert HEX32.match(choose_request_id(""))
