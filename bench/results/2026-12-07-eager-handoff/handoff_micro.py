"""What one hand-off costs: faust's fetcher awaits ``wait_first(delivery, suspend_flow.wait())``
for every message (mode's ``Service.wait_first``: four tasks, three cancelled); the eager
hand-off (services/shared/worker/eager_handoff.py) runs a delivery that does not wait on
the fetcher's own stack. The delivery here is a coroutine that returns at once, as a
faust delivery to a stream queue with room does. On uvloop, as the workers run.

    .venv/bin/python bench/results/2026-12-07-eager-handoff/handoff_micro.py
"""
import asyncio
import sys
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from services.shared.clients import kafka  # noqa: E402
from services.shared.settings import Settings  # noqa: E402
from services.shared.worker.faust_app import install_consumer  # noqa: E402

N = 50_000


async def delivery(i: int) -> int:
    return i


async def main() -> None:
    faust_app = kafka.faust_app(Settings(kafka_bootstrap="127.0.0.1:1"), "handoff-faust")
    eager_app = kafka.faust_app(Settings(kafka_bootstrap="127.0.0.1:1"), "handoff-eager")
    install_consumer(eager_app)
    consumers = {"faust": faust_app.consumer, "eager": eager_app.consumer}
    for rnd in range(5):
        line = []
        for name, consumer in consumers.items():
            started = time.perf_counter()
            for i in range(N):
                await consumer.wait_first(delivery(i), consumer.suspend_flow.wait())
            line.append(f"{name} {(time.perf_counter() - started) / N * 1e6:6.2f} us")
        print(f"round {rnd + 1}: " + ", ".join(line) + " a hand-off", flush=True)


uvloop.install()
asyncio.run(main())
