"""Which partitions each worker of a consumer group holds, as the group's coordinator has
it (``AdminClient.describe_consumer_groups``), not as the workers say.

    python -m deploy.assignment [--stack] [--group G ...] [--json]

Default groups: the fan-out's and the ranker's (``FEED_FANOUT_GROUP_ID``,
``FEED_RANKER_GROUP_ID``). A worker names itself to its group by its HTTP address
(``<app id>@<host>:<port>``, services/shared/worker/faust_app.py): the address of its
``/metrics``, ``/healthz`` and ``/readyz``, and Prometheus's ``instance`` label.
``python -m deploy.services status`` prints the same per worker it started.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from services.shared.clients import kafka
from services.shared.settings import KafkaSettings, Settings


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...]

    @property
    def address(self) -> str | None:
        """The worker's HTTP address (host:port) from its client id; None for a client
        that is not one of our workers."""
        _, at, address = self.client_id.rpartition("@")
        return address if at else None


@dataclass(frozen=True)
class Group:
    group_id: str
    state: str
    members: tuple[Member, ...]

    def by_address(self) -> dict[str, Member]:
        return {m.address: m for m in self.members if m.address is not None}


def worker_groups(settings: Settings) -> list[str]:
    """The fan-out's and the ranker's consumer groups (their faust app ids)."""
    prefix = settings.topic_prefix
    return [settings.fanout_group_id or f"{prefix}.fanout",
            settings.ranker_group_id or f"{prefix}.ranker"]


def describe(settings: KafkaSettings, groups: list[str], timeout_s: float = 10.0) -> list[Group]:
    """Each group's state and members, with the partitions the coordinator assigned each."""
    # librdkafka's own lines (a queue purged as the client goes) are not the answer.
    admin = kafka.admin(settings, logger=kafka.quiet_logger("deploy.assignment.kafka"))
    futures = admin.describe_consumer_groups(groups, request_timeout=timeout_s)
    out: list[Group] = []
    for group_id in groups:
        d = futures[group_id].result()
        members = tuple(
            Member(m.member_id, m.client_id, m.host,
                   tuple(sorted((tp.topic, tp.partition)
                                for tp in (m.assignment.topic_partitions if m.assignment else []))))
            for m in d.members)
        state = getattr(d.state, "name", str(d.state))
        out.append(Group(group_id, state, tuple(sorted(members, key=lambda m: m.client_id))))
    return out


def held(member: Member, prefix: str = "") -> str:
    """What a member holds, shortly: partition numbers with the topics that have them
    (faust assigns a partition number of every topic of the same size together)."""
    if not member.partitions:
        return "no partitions"
    by_numbers: dict[tuple[int, ...], list[str]] = defaultdict(list)
    per_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in member.partitions:
        per_topic[topic].append(partition)
    for topic, numbers in per_topic.items():
        short = topic[len(prefix):] if prefix and topic.startswith(prefix) else topic
        by_numbers[tuple(sorted(numbers))].append(short)
    parts = [f"{','.join(map(str, numbers))} of {', '.join(sorted(topics))}"
             for numbers, topics in sorted(by_numbers.items())]
    return f"{len(member.partitions)} partitions: " + "; ".join(parts)


def lines(groups: list[Group], prefix: str = "") -> list[str]:
    out: list[str] = []
    for g in groups:
        out.append(f"{g.group_id}: {g.state}, {len(g.members)} members")
        for m in g.members:
            out.append(f"  {m.client_id:<40} {held(m, prefix)}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.assignment", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--group", action="append", help="a consumer group (repeatable)")
    parser.add_argument("--stack", action="store_true",
                        help="the local development stack's addresses for what the environment does not set")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.stack:
        from deploy.stack.layout import Layout
        Layout.from_env().use_as_default()
    from services.shared.settings import get_settings
    settings = get_settings()
    groups = describe(settings, args.group or worker_groups(settings))
    if args.json:
        print(json.dumps([{**asdict(g), "members": [{**asdict(m), "address": m.address}
                                                     for m in g.members]} for g in groups], indent=2))
    else:
        print("\n".join(lines(groups, settings.topic_prefix + ".")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
