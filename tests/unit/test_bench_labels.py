"""The benchmark's computed parts: verdicts from measured values, the fan-out's write
window from its sampled row counter, and the raw writer's rows."""
from __future__ import annotations

import struct
from types import SimpleNamespace

from bench.harness.verdicts import all_of, verdict
from bench.fanout.raw_writer import _requests, history_posts, pairs_of
from bench.run.main import write_window


def test_a_verdict_is_computed_from_the_value_and_its_target() -> None:
    assert verdict(1.2, "<=", 1.5) == "met"
    assert verdict(1.6, "<=", 1.5) == "**missed**"
    assert verdict(0.85, ">=", 0.8) == "met"
    assert verdict(0.7, ">=", 0.8) == "**missed**"
    assert verdict(None, "<=", 1.5) == "n/a"
    assert verdict(float("nan"), "<=", 1.5) == "n/a"
    assert all_of("met", "**missed**") == "**missed**"
    assert all_of("met", "n/a") == "n/a"
    assert all_of("met", "met") == "met"


def sample(t: float, rows: float) -> SimpleNamespace:
    return SimpleNamespace(t=t, inbox_rows=rows)


def test_the_write_window_runs_from_the_last_idle_sample_to_the_first_complete_one() -> None:
    samples = [sample(0, 100), sample(1, 100), sample(2, 100), sample(3, 150), sample(4, float("nan")),
               sample(5, 290), sample(6, 300), sample(7, 300)]
    assert write_window(samples, since=0.5, rows_before=100, rows=200) == 6 - 2
    # The first rows landed within one interval of ``since``: the last idle sample before
    # it starts the window (the 2026-12-02 short run had no idle sample after ``since``).
    assert write_window(samples, since=2.5, rows_before=100, rows=200) == 6 - 2
    # Never complete: no window, rather than a made-up one.
    assert write_window(samples, since=0, rows_before=100, rows=500) is None


def history_pairs(follower: list[int], followed: list[int], posts: list[tuple[int, int, None, str]],
                  skip_authors: set[int], limit: int) -> list[tuple[int, int]]:
    """The (reader, post) rows a fan-out of ``posts`` writes, as bench/run/main.py takes them."""
    chosen, fans = history_posts(follower, followed, posts, skip_authors, limit)
    return pairs_of(chosen, fans, limit)


def test_history_pairs_are_the_followers_of_each_ordinary_authors_posts() -> None:
    follower, followed = [10, 11, 12, 10], [1, 1, 2, 3]
    posts = [(100, 1, None, ""), (101, 2, None, ""), (102, 3, None, ""), (103, 1, None, "")]
    assert history_pairs(follower, followed, posts, skip_authors={3}, limit=10) == [
        (10, 100), (11, 100), (12, 101), (10, 103), (11, 103)]
    assert history_pairs(follower, followed, posts, skip_authors=set(), limit=3) == [
        (10, 100), (11, 100), (12, 101)]


def test_history_posts_stop_at_the_post_that_reaches_the_row_limit() -> None:
    follower, followed = [10, 11, 12, 10], [1, 1, 2, 3]
    posts = [(100, 1, None, ""), (101, 4, None, ""), (102, 2, None, ""), (103, 3, None, ""),
             (104, 1, None, "")]
    chosen, fans = history_posts(follower, followed, posts, skip_authors={3}, limit=3)
    # Author 4 has no followers (no rows to write), 3 is skipped; 100 and 102 make 3 rows.
    assert chosen == [(100, 1), (102, 2)]
    assert fans[1] == [10, 11] and fans[2] == [12]


class FakeStatement:
    """A prepared INSERT's stand-in: ``bind`` keeps the values as given (the raw writer
    packs only the reader, the first one)."""

    query_id = b"q"

    def bind(self, params: tuple) -> SimpleNamespace:
        return SimpleNamespace(values=list(params))


def test_the_raw_writer_sends_every_row_once_whatever_the_grouping() -> None:
    pairs = [(r, p) for p in range(30) for r in range(7)]
    host = object()
    session = SimpleNamespace(keyspace="k", cluster=SimpleNamespace(
        metadata=SimpleNamespace(all_hosts=lambda: [host, object()], get_replicas=lambda _ks, _key: [host])))
    stmt = FakeStatement()
    for strategy, size in (("rows", 1), ("partition", 50), ("replicas", 50), ("replicas", 200),
                           ("posts", 5), ("posts", 50)):
        requests = _requests(session, stmt, strategy, size, pairs, 604800, 1)
        sent = []
        for request, params in requests:
            if strategy == "rows":
                sent.append(params)
                continue
            entries = [(struct.unpack(">q", v[0])[0], *v[1:])
                       for _prepared, query_id, v in request._statements_and_parameters]
            assert len(entries) <= size
            assert request.routing_key == struct.pack(">q", entries[0][0])  # to its first row's replica
            if strategy == "partition":
                assert len({e[0] for e in entries}) == 1  # one reader's partition
            if strategy == "posts":  # as the fan-out writes: a post's readers, in order
                readers = [e[0] for e in entries]
                assert len(set(readers)) == len(readers)
            sent += entries
        assert sorted((p[0], p[2]) for p in sent) == sorted(pairs), strategy
        if strategy == "posts":
            assert [(p[0], p[2]) for p in sent] == pairs  # the order given
        assert all(p[4] == 604800 for p in sent)


def test_read_headline_rows_are_verdicts_against_pull_and_healthz_at_each_level() -> None:
    from bench.run.main import headline

    def wrk(per_s: float, p95: float, **labels: object) -> dict[str, object]:
        return {**labels, "concurrency": 16, "per_s": per_s, "p95_ms": p95}

    r = {"reads": [wrk(900, 12, group="large", page="first"), wrk(500, 20, group="large", page="next")],
         "baselines": [wrk(800, 30, name="pull from Postgres (the specified query, lateral, 2 workers), "
                                        "large readers, first pages", page="first"),
                       wrk(400, 25, name="pull from Postgres (the specified query, lateral, 2 workers), "
                                        "large readers, next pages", page="next"),
                       wrk(3000, 2, name="noop HTTP endpoint (/healthz, ours)", page="healthz")],
         "freshness": {"p95_s": 1.0},
         "fanout": {"history posts → inbox rows written (hybrid, inactive readers skipped)": 10,
                    "same posts under pure fan-out-on-write (rows, computed: followers × posts)": 400,
                    "history fan-out rows/s over its write window (computed from 1 s samples)": 900},
         "raw": {"cassandra": {"rows_per_s": 1000, "best": {"strategy": "partition",
                                                           "rows per request (at most)": 50,
                                                           "in flight": 32}}}}
    rows = {row["figure"]: row for row in headline(r)}
    first = rows["first pages, large readers, wrk c16: pages/s, p95"]
    nxt = rows["next pages, large readers, wrk c16: pages/s, p95"]
    assert first["verdict"] == "met" and first["ratio"] == "1.125x pull, 0.300x /healthz"
    # 1.25x pull and p95 within 15 ms would pass; 500/3000 is under a quarter of /healthz,
    # and p95 20 ms is over 15 ms: missed, by code.
    assert nxt["verdict"] == "**missed**"


def test_fanout_ceilings_spread_the_other_components_cpu_over_the_cores() -> None:
    from bench.run.main import cores_of, fanout_ceilings

    history = {"inbox rows": 1_000_000,
               "window": {"fanout CPU-s": 30.0, "cassandra CPU-s": 60.0, "ranker CPU-s": 20.0,
                          "kafka CPU-s": 10.0, "kafka records written": 5_000, "window s": 60.0}}
    floor_step = {"Cassandra CPU µs per row (computed)": 25.0}
    ceilings = fanout_ceilings(history, floor_step, cores=2)
    # A free worker: 90 CPU-s of other work on 2 cores is 45 s for 1M rows.
    assert ceilings["free worker"] == round(1_000_000 / 45)
    # And a node at the floor's 25 µs a row: 25 + 20 + 10 = 55 CPU-s, 27.5 s.
    assert ceilings["free worker, node at the floor's cost"] == round(1_000_000 / 27.5)
    assert fanout_ceilings({**history, "inbox rows": 0}, floor_step, cores=2) == {
        "free worker": None, "free worker, node at the floor's cost": None}
    assert cores_of({"cores": 4}) == 4
    assert cores_of({"machine": "polyglot 2 cores, 24 GiB, Python 3.11"}) == 2


def test_bad_grid_cell_options_are_a_usage_error_not_a_traceback(capsys) -> None:
    import argparse
    from datetime import datetime, timezone

    import pytest

    from bench.read.grid import grid_args, grid_or_usage_error

    parser = argparse.ArgumentParser(prog="ab")
    grid_args(parser)
    for bad in (["--skip", "none"], ["--follows", "ten"]):
        with pytest.raises(SystemExit) as exited:
            grid_or_usage_error(parser, parser.parse_args(bad), datetime.now(timezone.utc))
        assert exited.value.code == 2
        assert "take numbers" in capsys.readouterr().err
