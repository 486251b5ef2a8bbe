"""The fault suite's ``fanout-group-kill`` (tests/faults/scale.py): what it records of the
fan-out group around the kill, when that says the run did not test the group, how it
finds a supervisor's worker, and how the report reads it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from deploy.assignment import Group, Member
from tests.faults.__main__ import _verdict
from tests.faults.checker import Verdict
from tests.faults.injectors import HOLD_S, SCENARIOS
from tests.faults.scale import VICTIM, WORKERS, GroupEvidence, child_pid, snapshot

NAMES = {"127.0.0.1:9102": "fanout", "127.0.0.1:9112": "fanout-1", "127.0.0.1:9122": "fanout-2"}


def _member(port: int, *partitions: int) -> Member:
    return Member(f"m-{port}", f"feed.fanout@127.0.0.1:{port}", "/127.0.0.1",
                  tuple(("feed.public.posts", p) for p in partitions))


def test_the_scenario_is_listed_with_its_hold() -> None:
    assert "fanout-group-kill" in SCENARIOS and HOLD_S["fanout-group-kill"] > 6.0
    assert WORKERS == 3 and VICTIM == "fanout-1"


def test_a_kill_that_moved_the_victims_partitions_to_the_others_is_a_test_of_the_group() -> None:
    before = snapshot(Group("feed.fanout", "STABLE", (_member(9102, 0, 3), _member(9112, 1, 4),
                                                      _member(9122, 2, 5))), NAMES, "feed.")
    assert before["members"]["fanout-1"] == {"partitions": 2, "held": "2 partitions: 1,4 of public.posts"}
    assert before["partitions_held"] == 6
    during = snapshot(Group("feed.fanout", "STABLE", (_member(9102, 0, 1, 3), _member(9122, 2, 4, 5))),
                      NAMES, "feed.")
    ev = GroupEvidence(before=before, during=during, victim=VICTIM, draining_lag_at_kill=12_000)
    assert ev.problems() == []
    assert ev.as_dict()["problems"] == []


def test_runs_that_did_not_test_the_group_say_why() -> None:
    two = snapshot(Group("feed.fanout", "STABLE", (_member(9102, 0, 1, 2), _member(9122, 3, 4, 5))),
                   NAMES, "feed.")
    idle = snapshot(Group("feed.fanout", "STABLE", (_member(9102, 0, 1, 2), _member(9112),
                                                    _member(9122, 3, 4, 5))), NAMES, "feed.")
    three = snapshot(Group("feed.fanout", "STABLE", (_member(9102, 0, 3), _member(9112, 1, 4),
                                                     _member(9122, 2, 5))), NAMES, "feed.")
    rebalancing = snapshot(Group("feed.fanout", "PREPARING_REBALANCING", (_member(9102, 0, 3),)),
                           NAMES, "feed.")
    assert GroupEvidence(before=two, during=two, victim=VICTIM).problems()[0] == (
        "2 fan-out members before the kill, not 3")
    assert "a fan-out member held no partition before the kill" in GroupEvidence(
        before=idle, during=two, victim=VICTIM).problems()
    stuck = GroupEvidence(before=three, during=three, victim=VICTIM).problems()
    assert "the killed worker was still a member during the hold" in stuck
    short = GroupEvidence(before=three, during=rebalancing, victim=VICTIM).problems()
    assert short == ["the workers left did not hold every partition during the hold (2 of 6)"]
    idle_kill = GroupEvidence(before=three, during=two, victim=VICTIM, draining_lag_at_kill=0)
    assert idle_kill.problems() == ["nothing was waiting when the worker was killed: not mid-drain"]


def test_the_report_misses_a_clean_run_that_did_not_test_the_group() -> None:
    result = {"scenario": "fanout-group-kill", "ok": True, "verdict": Verdict().as_dict(),
              "backlog": {"posts": 2000}, "goodput": {"collapsed": False},
              "celebrity_tier": "celebrity", "group": {"problems": []}}
    assert _verdict(result) == "ok"
    result["group"] = {"problems": ["2 fan-out members before the kill, not 3"]}
    assert _verdict(result) == "MISSED (not a test of the group: 2 fan-out members before the kill, not 3)"


def test_a_supervisors_worker_is_its_child() -> None:
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys, time; "
                               "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
                               "print(c.pid, flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    child = None
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert child_pid(parent.pid) == child
    finally:
        if child is not None:
            os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait(10)
