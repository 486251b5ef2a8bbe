"""The fault suite's bookkeeping (tests/faults): lag recovery and the report row."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.faults.__main__ import LagWatch, freshness_by_phase, row
from tests.faults.checker import Verdict
from tests.faults.workload import Cast, Ledger, Served


def _checked() -> Any:
    """The parts of a Workload the checks read: a small cast, an empty ledger."""
    return SimpleNamespace(cast=Cast(wide=1, celebrity=4, authors=[2, 3], readers=[10, 11],
                                     fans=[20], watcher=10, moderator=30),
                           ledger=Ledger())


def test_lag_is_back_to_zero_at_the_first_zero_sample_after_the_lift():
    watch = LagWatch.__new__(LagWatch)
    watch.samples = [(100.0, 0), (101.0, 40), (102.0, None), (103.0, 5), (104.5, 0), (106.0, 0)]
    assert watch.zero_after(101.0) == 3.5
    assert watch.zero_after(107.0) is None
    assert watch.max_lag() == 40
    # Before the fault (t < 101) the lag peaked at 0, so the ceiling is 10: back at 103.
    assert watch.recovered_after(100.5, 101.0) == 2.0


def test_a_verdict_with_any_loss_or_drift_misses_and_the_row_says_so():
    assert Verdict().ok()
    for field in ("lost_writes", "feed_lost", "feed_duplicated", "wrongly_visible",
                  "follower_drift", "like_drift", "dlq_records", "stream_gaps", "cdc_unsent", "kafka_lost", "readers_over_cap",
                  "wrongly_refused"):
        assert not Verdict(**{field: 1}).ok(), field
    result = {"scenario": "cassandra-kill", "faults": ["SIGKILL cassandra-3"],
              "verdict": Verdict(acked_writes=10, feed_lost=2).as_dict(), "ok": False,
              "non_2xx_during": 1, "requests_during": 200, "server_errors_other_than_503": 0,
              "freshness_max_during_s": 1.2, "lag_recovered_after_lift_s": 4.0,
              "lag_zero_after_load_s": 1.0}
    text = row(result)
    assert text.startswith("| cassandra-kill | 1 | 10 | 2 / 0 / 0 | 0 of 0 actions, 0 pages | 0 | not traced |")
    assert "0.5% failed" in text and text.rstrip().endswith("MISSED |")
    unpromoted = {**result, "verdict": Verdict(acked_writes=10).as_dict(), "ok": True,
                  "celebrity_tier": None}
    assert row(unpromoted).rstrip().endswith("MISSED (the celebrity was not promoted) |")
    assert row({**unpromoted, "celebrity_tier": "celebrity"}).rstrip().endswith("| ok |")
    traced = {**result, "verdict": Verdict(cdc_unsent=1, kafka_lost=0).as_dict()}
    assert "| 1 / 0 |" in row(traced)
    assert Verdict(cdc_unsent=0, kafka_lost=0).ok()
    # A reader owed more than its inbox keeps cannot tell loss from the cap's trim.
    over = {**result, "verdict": Verdict(readers_over_cap=4, feed_lost=190).as_dict()}
    assert row(over).rstrip().endswith("INCONCLUSIVE (4 readers owed more than the inbox cap keeps) |")


def test_a_followed_post_neither_streamed_nor_resynced_is_a_silent_gap():
    from tests.faults.checker import stream_gaps

    w = _checked()
    led = w.ledger
    led.follows[(10, 2)] = True
    led.stream_opened.append(100.0)
    led.posts.update({501: (1, 102.0), 502: (2, 103.0), 503: (3, 104.0),  # 3: not followed
                      504: (1, 105.0), 505: (1, 100.5), 506: (1, 108.0), 507: (2, 109.0),
                      508: (4, 102.0)})  # the celebrity's: followed throughout, never sent
    led.deleted.add(504)
    led.hidden_posts[504] = 105.5
    led.stream += [(102.5, "new_item", 501, None), (107.0, "resync", None, None),
                   (110.0, "new_item", 507, 109.9)]
    # 502 acked before the resync: covered; 505 before the stream settled; 506 after the
    # resync and never announced: a silent gap; 508 acked before the resync: covered.
    assert stream_gaps(w) == (1, [506])
    led.posts[509] = (4, 108.5)  # the celebrity's, after the resync and never announced
    assert stream_gaps(w) == (2, [506, 509])
    assert stream_gaps(SimpleNamespace(cast=w.cast, ledger=Ledger()))[0] == 0


def test_an_item_served_after_the_ack_of_what_hides_it_is_counted_and_none_before() -> None:
    from tests.faults.checker import shown_after_ack
    from tests.faults.workload import PairHidden

    w = _checked()
    led = w.ledger
    led.posts.update({501: (2, 100.0), 502: (3, 100.0), 503: (2, 100.0)})
    led.hidden_posts[501] = 110.0                                  # deleted, acked at 110
    led.pair_hidden += [PairHidden(11, 3, "block", 120.0),          # reader 11 blocked by 3
                        PairHidden(10, 2, "unfollow", 130.0, until=140.0)]
    led.pages += [Served(109.9, 11, (501, 502)),   # before both acks: fine
                  Served(110.0, 11, (501,)),       # started as the delete was acked: shown after
                  Served(125.0, 11, (502,)),       # after the block
                  Served(125.0, 10, (502, 503)),   # another reader: not blocked, still following
                  Served(141.0, 10, (503,))]       # followed again at 140
    led.stream += [(135.0, "new_item", 503, 134.9), (136.0, "resync", None, None),
                   # written before the delete's answer, read by this client after it
                   (110.2, "new_item", 501, 109.95)]
    count, examples = shown_after_ack(w)
    assert count == 3
    assert [(e["where"], e["reader"], e["post"], e["why"]) for e in examples] == [
        ("page", 11, 501, "deleted or removed"), ("page", 11, 502, "block"),
        ("stream", 10, 503, "unfollow")]


def test_the_expected_alert_must_fire_during_the_fault_and_clear_after_the_lift() -> None:
    from tests.faults.__main__ import AlertWatch

    watch = AlertWatch.__new__(AlertWatch)
    a, none = frozenset({"FeedCassandraNodeUnreachable"}), frozenset()
    watch.samples = [(100.0, none), (130.0, a), (140.0, None), (200.0, a), (215.0, none)]
    got = watch.summary("FeedCassandraNodeUnreachable", fault_at=110.0, lifted_at=190.0)
    assert (got["fired_after_fault_s"], got["resolved_after_lift_s"], got["ok"]) == (20.0, 25.0, True)
    assert got["unreachable_polls"] == 1
    never = watch.summary("FeedKafkaBrokerUnreachable", fault_at=110.0, lifted_at=190.0)
    assert (never["fired_after_fault_s"], never["ok"]) == (None, False)
    result = {"scenario": "cassandra-kill", "faults": ["SIGKILL cassandra-3"],
              "verdict": Verdict(acked_writes=10).as_dict(), "ok": True, "non_2xx_during": 0,
              "requests_during": 100, "server_errors_other_than_503": 0, "freshness_max_during_s": 1.0,
              "lag_recovered_after_lift_s": 2.0, "lag_zero_after_load_s": 1.0, "alert": never}
    assert row(result).rstrip().endswith("| FeedKafkaBrokerUnreachable never fired | MISSED (alert) |")
    result["alert"] = got
    assert row(result).rstrip().endswith("fired 20.0 s after the fault, cleared 25.0 s after the lift | ok |")


def test_freshness_is_split_at_the_fault_and_five_seconds_after_the_lift():
    # (acked at, seconds to the first page); fault at 10, lifted at 20.
    samples = [(1.0, 0.5), (9.9, 1.5), (10.0, 4.0), (24.9, 9.0), (25.1, 2.0)]
    phases = freshness_by_phase(samples, 10.0, 20.0)
    assert phases["before"] == {"posts": 2, "p50_s": 0.5, "p95_s": 0.5, "max_s": 1.5}
    assert phases["during"] == {"posts": 2, "p50_s": 4.0, "p95_s": 4.0, "max_s": 9.0}
    assert phases["after"] == {"posts": 1, "p50_s": 2.0, "p95_s": 2.0, "max_s": 2.0}
    assert freshness_by_phase([], 10.0, 20.0)["during"] == {
        "posts": 0, "p50_s": None, "p95_s": None, "max_s": None}


def test_the_warm_up_runs_on_until_a_window_is_clean_and_fresh_or_its_limit(monkeypatch):
    import asyncio
    import time
    from collections import Counter
    from types import SimpleNamespace

    from tests.faults import __main__ as suite

    monkeypatch.setattr(suite, "STEADY_WINDOW_S", 0.05)

    def workload(fresh_s: float, failing: bool):
        ledger = SimpleNamespace(statuses={"before": Counter({"200": 5, "503": 1})}, freshness_s=[])
        w = SimpleNamespace(ledger=ledger)

        async def traffic():  # a post acked and seen every 10 ms; a 503 each time if failing
            while True:
                ledger.freshness_s.append((time.time(), fresh_s))
                ledger.statuses["before"]["503" if failing else "200"] += 1
                ledger.statuses["before"]["404"] += 1  # the workload's own misses: not failures
                await asyncio.sleep(0.01)
        return w, traffic

    async def scenario(fresh_s: float, failing: bool) -> tuple[bool, float]:
        w, traffic = workload(fresh_s, failing)
        task = asyncio.ensure_future(traffic())
        started = time.time()
        try:
            return await suite.steady(w, 0.02, 0.3), time.time() - started
        finally:
            task.cancel()

    ok, took = asyncio.run(scenario(1.0, False))  # an old 503 does not count: a clean window does
    assert ok and took < 0.2
    assert asyncio.run(scenario(9.0, False))[0] is False   # stale posts: on to the limit
    assert asyncio.run(scenario(1.0, True))[0] is False    # answers still failing (503)


def test_goodput_collapse_counts_only_low_windows_while_draining_outside_the_fault() -> None:
    from tests.faults.backlog import goodput_summary

    # (at, events applied so far, events waiting): 5 s windows from t=100.
    rates = [1000, 1000, 900, 100, 100, 100, 1000, 100, 100, 100, 100, 100, 100, 100, 50, 50]
    lags = [50_000] * 14 + [500, 500]          # the last two windows: drained
    samples, applied = [(100.0, 0, 60_000)], 0
    for i, (rate, lag) in enumerate(zip(rates, lags)):
        applied += rate * 5
        samples.append((105.0 + 5 * i, applied, lag))
    # The fault: t=115..125 (the windows ending at 115, 120, 125, 130 are excused).
    got = goodput_summary(samples, 100.0, fault_at=115.0, lifted_at=125.0)
    assert got["peak_per_s"] == 1000
    # Low while draining outside the fault: 140..170 (7 windows = 35 s); the drained tail
    # (50/s with 500 waiting) and the fault's windows do not count.
    assert got["longest_below_30pct_while_draining_s"] == 35.0
    assert got["collapsed"]
    fine = goodput_summary(samples[:10], 100.0, fault_at=115.0, lifted_at=125.0)
    assert not fine["collapsed"]


def test_a_muted_authors_post_served_to_the_muter_after_the_ack_counts_one_way_until_unmuted() -> None:
    from tests.faults.checker import shown_after_ack
    from tests.faults.workload import PairHidden

    w = _checked()
    led = w.ledger
    led.posts.update({601: (2, 100.0), 602: (11, 100.0)})
    led.pair_hidden.append(PairHidden(11, 2, "mute", 120.0, until=150.0))  # 11 mutes 2
    led.pages += [Served(119.0, 11, (601,)),    # before the mute's ack: fine
                  Served(121.0, 11, (601,)),    # after it: shown after the ack
                  Served(121.0, 2, (602,)),     # the muted author still sees the muter
                  Served(151.0, 11, (601,))]    # unmuted at 150
    count, examples = shown_after_ack(w)
    assert count == 1
    assert [(e["reader"], e["post"], e["why"]) for e in examples] == [(11, 601, "mute")]


def test_a_suspended_authors_post_served_to_anyone_after_the_ack_counts_until_unsuspended() -> None:
    from tests.faults.checker import shown_after_ack
    from tests.faults.workload import AccountHidden

    w = _checked()
    led = w.ledger
    led.posts.update({701: (2, 100.0), 702: (3, 100.0)})
    led.account_hidden.append(AccountHidden(2, 120.0, until=150.0))   # 2 suspended, then lifted
    led.pages += [Served(119.0, 11, (701,)),    # before the suspension's ack: fine
                  Served(121.0, 11, (701,)),    # after it: shown after the ack, to any reader
                  Served(122.0, 10, (701, 702)),  # another reader too; 702's author is not suspended
                  Served(151.0, 11, (701,))]    # unsuspended at 150
    count, examples = shown_after_ack(w)
    assert count == 2
    assert [(e["reader"], e["post"], e["why"]) for e in examples] == [
        (11, 701, "suspension"), (10, 701, "suspension")]


def test_an_unacknowledged_suspension_counts_nothing_and_the_unsuspend_request_ends_it() -> None:
    from tests.faults.checker import shown_after_ack
    from tests.faults.workload import AccountHidden

    w = _checked()
    led = w.ledger
    led.posts.update({801: (2, 100.0), 802: (3, 100.0)})
    inf = float("inf")
    # 2: requested at 119, acked at 120, the unsuspend's request at 150, its ack at 151.
    led.account_hidden.append(AccountHidden(2, 120.0, until=150.0, requested=119.0, lifted=151.0))
    # 3: a suspension whose answer never came (it may have happened): nothing to count.
    led.account_hidden.append(AccountHidden(3, inf, until=140.0, requested=130.0, lifted=141.0))
    led.pages += [Served(119.5, 11, (801,)),   # during the request, before the ack: fine
                  Served(150.0, 11, (801,)),   # the unsuspend's request had started: fine
                  Served(149.9, 11, (801,)),   # counted
                  Served(149.5, 11, (801,), 150.3),  # in flight across the unsuspend: either
                  Served(149.0, 11, (801,), 149.8),  # answered before it: counted
                  Served(135.0, 10, (802,))]   # unacknowledged: not counted
    led.stream.append((149.0, "new_item", 801, 148.0))   # the watcher's stream: counted
    count, examples = shown_after_ack(w)
    assert count == 3
    assert [(e["where"], e["post"], e["why"], e["answered_s"]) for e in examples] == [
        ("page", 801, "suspension", 0.0), ("page", 801, "suspension", 0.8),
        ("stream", 801, "suspension", 0.0)]
    assert led.suspended_between(2, 151.0, 160.0) and not led.suspended_between(2, 151.1, 160.0)
    assert led.suspended_between(3, 0.0, 130.0) and not led.suspended_between(3, 0.0, 129.9)


def test_a_post_whose_author_was_suspended_after_its_ack_is_no_stream_gap() -> None:
    from tests.faults.checker import stream_gaps
    from tests.faults.workload import AccountHidden

    w = _checked()
    led = w.ledger
    led.follows[(10, 2)] = True
    led.stream_opened.append(100.0)
    led.posts.update({901: (2, 105.0),    # suspended at 106, lifted at 112: never announced
                      902: (2, 113.0),    # after the lift: owed, never sent, a gap
                      903: (1, 105.0)})   # the wide author's, never suspended: a gap
    led.account_hidden.append(AccountHidden(2, 106.5, until=111.0, requested=106.0, lifted=112.0))
    assert stream_gaps(w) == (2, [902, 903])
    # A suspension still in force (never lifted) covers every later post of its author.
    led.account_hidden.append(AccountHidden(1, 120.0, requested=119.0, lifted=float("inf")))
    assert stream_gaps(w) == (1, [902])


def _fake_workload(handler):  # noqa: ANN001, ANN202 - a Workload on a fake API
    import httpx

    from services.shared.settings import Settings
    from tests.faults.workload import Workload

    w = Workload(Settings(), seed=3, readers=6, authors=4, fans=1)
    w._client = httpx.AsyncClient(base_url="http://api.test", transport=httpx.MockTransport(handler))
    return w


def _suspended_problem():  # noqa: ANN202
    import httpx

    return httpx.Response(403, json={"type": "https://feed.example/problems/account-suspended",
                                     "title": "Account suspended", "status": 403},
                          headers={"content-type": "application/problem+json"})


def test_a_suspended_authors_refused_post_is_an_expected_refusal_not_an_error_nor_acked() -> None:
    import asyncio

    import httpx

    from tests.faults.__main__ import failed
    from tests.faults.checker import Verdict, wrongly_refused
    from tests.faults.workload import AccountHidden

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/posts"
        return _suspended_problem()

    async def scene() -> None:
        w = _fake_workload(handler)
        w.rng.random = lambda: 0.99   # an ordinary author posts
        w.rng.choice = lambda seq: seq[0]
        author = w.cast.authors[0]
        w.ledger.account_hidden.append(AccountHidden(author, 50.0, requested=49.0, lifted=float("inf")))
        await w._post()
        assert w.ledger.posts == {}
        assert w.ledger.refusals["before"] == {"account-suspended": 1}
        assert w.ledger.statuses["before"] == {"403": 1} and failed(w.ledger.statuses["before"]) == 0
        assert wrongly_refused(w) == 0
        # Lifted (acked) before the next post started: a refusal now is a wrong one.
        w.ledger.account_hidden[0].until, w.ledger.account_hidden[0].lifted = 60.0, 61.0
        w.phase = "during"
        await w._post()
        assert w.ledger.refusals["during"] == {"account-suspended while active": 1}
        assert wrongly_refused(w) == 1 and not Verdict(wrongly_refused=1).ok()
        await w._client.aclose()

    asyncio.run(scene())


def test_the_suspension_turn_suspends_an_author_the_watcher_does_not_follow_then_lifts_it(monkeypatch) -> None:
    import asyncio
    import json

    import httpx

    from tests.faults import workload as wl

    calls: list[tuple[str, str]] = []
    lift_answers = [503, 200]   # the first unsuspend fails: asked again at the next turn

    def handler(request: httpx.Request) -> httpx.Response:
        action = json.loads(request.content)["action"]
        calls.append((request.url.path, action))
        assert request.headers["Authorization"] == "Bearer " + w._moderator_token
        status = 200 if action == "suspend" else lift_answers.pop(0)
        return httpx.Response(status, json={"user_id": request.url.path.rsplit("/", 1)[1],
                                            "state": "suspended" if action == "suspend" else "active"})

    w = _fake_workload(handler)
    watcher = w.cast.watcher
    followed = w.cast.authors[:3]
    for author in [w.cast.wide, w.cast.celebrity, *followed]:
        w.ledger.follows[(watcher, author)] = True
    w.ledger.follows[(w.cast.readers[2], w.cast.authors[3])] = True
    clock = [1000.0]
    monkeypatch.setattr(wl.time, "time", lambda: clock[0])

    async def scene() -> None:
        # Loop 0's share is the one author the watcher does not follow.
        assert w._suspendable(0) == [w.cast.authors[3]] and w._suspendable(1) == []
        assert await w._suspend(1) is None and not calls
        reader = await w._suspend(0)
        assert reader == w.cast.readers[2]        # a follower of the suspended author reads
        held = w.ledger.account_hidden[0]
        assert (held.author, held.since, held.requested) == (w.cast.authors[3], 1000.0, 1000.0)
        assert w.ledger.actions["suspend"] == 1
        clock[0] += 1.0
        assert await w._suspend(0) is None        # held less than SUSPEND_HOLD_S: kept
        clock[0] += wl.SUSPEND_HOLD_S
        await w._suspend(0)                       # 503: may have lifted; asked again
        assert held.until == clock[0] and held.lifted == float("inf") and w._suspended
        clock[0] += 1.0
        assert await w.lift_suspensions() == 0
        assert held.until == clock[0] - 1.0 and held.lifted == clock[0] and not w._suspended
        assert w.ledger.actions["unsuspend"] == 1
        assert calls == [(f"/internal/moderation/users/{w.cast.authors[3]}", a)
                         for a in ("suspend", "unsuspend", "unsuspend")]
        await w._client.aclose()

    asyncio.run(scene())


def test_a_post_held_back_by_a_suspension_is_no_freshness_sample(monkeypatch) -> None:
    import asyncio

    import httpx

    from tests.faults import workload as wl
    from tests.faults.workload import AccountHidden

    shown: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"items": [{"post_id": str(p)} for p in shown],
                                         "next_cursor": None})

    w = _fake_workload(handler)
    a, b = w.cast.authors[0], w.cast.authors[1]
    w.ledger.posts.update({1: (a, 100.0), 2: (b, 100.0)})
    w.ledger.account_hidden.append(AccountHidden(a, 101.0, until=110.0, requested=100.5, lifted=111.0))
    monkeypatch.setattr(wl.time, "time", lambda: 112.0)

    async def scene() -> None:
        shown.extend([1, 2])
        await w._look()
        assert w.ledger.freshness_s == [(100.0, 12.0)]   # b's post only
        assert w._seen == {1, 2}
        await w._client.aclose()

    asyncio.run(scene())


def test_a_deleted_accounts_post_counts_for_good_and_the_deletion_drops_the_follows() -> None:
    import asyncio

    import httpx

    from tests.faults.checker import shown_after_ack
    from tests.faults.workload import AccountHidden

    answers = [204]

    def handler(request: httpx.Request) -> httpx.Response:
        assert (request.method, request.url.path) == ("DELETE", "/v1/me")
        return httpx.Response(answers.pop(0))

    w = _fake_workload(handler)
    leaving = w.cast.leaving[0]
    assert len(w.cast.leaving) == 2 and leaving in w.cast.everyone and leaving not in w.cast.posting
    follower = w.cast.readers[1]
    w.ledger.follows[(follower, leaving)] = True
    w.ledger.posts.update({i: (leaving, 100.0) for i in range(1, 13)})

    async def scene() -> None:
        assert await w._delete_account(leaving) == follower
        gone = w.ledger.account_hidden[0]
        assert gone.kind == "deletion" and gone.since < float("inf") and gone.until == float("inf")
        assert w.ledger.actions["delete_account"] == 1
        assert w.ledger.follows[(follower, leaving)] is False
        assert w._older_alive_post() is None      # never deleted or removed by the workload
        await w._client.aclose()

    asyncio.run(scene())
    since = w.ledger.account_hidden[0].since
    w.ledger.pages += [Served(since - 1.0, follower, (1,)), Served(since + 1000.0, follower, (1,))]
    count, examples = shown_after_ack(w)
    assert count == 1 and examples[0]["why"] == "deletion"
    # A deletion never answered may have happened: it counts nothing, nor does an old one
    # by hand without a request time.
    w.ledger.account_hidden[:] = [AccountHidden(leaving, float("inf"), kind="deletion")]
    assert shown_after_ack(w)[0] == 0


def test_a_lift_never_answered_may_undo_a_later_hide_which_then_binds_nothing() -> None:
    from tests.faults.checker import shown_after_ack
    from tests.faults.workload import IN_DOUBT_S, AccountHidden, PairHidden

    w = _checked()
    led = w.ledger
    led.posts.update({901: (2, 100.0), 902: (3, 100.0)})
    # 2: an unsuspend at 110 never answered (it may commit until 110 + IN_DOUBT_S), then
    # suspended again at 120: pages after that prove nothing. 3: the same, but suspended
    # again only after the doubt is over: counted.
    led.lifts_in_doubt += [("suspension", 2, 2, 110.0), ("suspension", 3, 3, 110.0)]
    led.account_hidden += [AccountHidden(2, 120.0), AccountHidden(3, 110.0 + IN_DOUBT_S + 1)]
    # Reader 11 blocked by 3 at 130; an unblock of 11 by 3 (the other way round) sent at
    # 125 was never answered: the block binds nothing. Reader 10 mutes 2 at 130, and an
    # unmute of 3 (another pair) is in doubt: counted.
    led.lifts_in_doubt += [("block", 11, 3, 125.0), ("mute", 10, 3, 125.0)]
    led.pair_hidden += [PairHidden(11, 3, "block", 130.0), PairHidden(10, 2, "mute", 130.0)]
    late = 110.0 + IN_DOUBT_S + 2
    led.pages += [Served(121.0, 11, (901,)),    # 2's suspension may be undone: not counted
                  Served(late, 11, (902,)),     # 3's later suspension: counted
                  Served(131.0, 11, (902,)),    # 3's block of 11 may be undone: not counted
                  Served(131.0, 10, (901,))]    # 10's mute of 2: counted (902 is 3's, not muted)
    count, examples = shown_after_ack(w)
    assert [(e["reader"], e["post"], e["why"]) for e in examples] == [
        (11, 902, "suspension"), (10, 901, "mute")]
    assert count == 2
