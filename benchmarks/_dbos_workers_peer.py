"""The DBOS side of ``python -m benchmarks workers``, run with the DBOS peer's interpreter.

Usage:
  python _dbos_workers_peer.py worker URL SCHEMA CONCURRENCY   (prints "ready", runs until killed)
  python _dbos_workers_peer.py enqueue URL SCHEMA COUNT        (prints "enqueued")

The workload is ours: a workflow of 10 durable steps (each a checkpointed DBOS step),
enqueued on a DBOS queue that worker processes take from, with DBOS's system database on
PostgreSQL (schema SCHEMA). Completion is read from the system database by the benchmark.
"""

from __future__ import annotations

import sys
import threading

from dbos import DBOS, DBOSClient, DBOSConfig, EnqueueOptions

STEPS = 10


def _config(url: str, schema: str) -> DBOSConfig:
    return {
        "name": "magistrate-bench",
        "system_database_url": url,
        "dbos_system_schema": schema,
        "log_level": "WARNING",
        "console_log_level": "WARNING",
        "enable_otlp": False,
    }


def main(argv: list[str]) -> None:
    mode, url, schema, number = argv[0], argv[1], argv[2], int(argv[3])
    if mode == "enqueue":
        client = DBOSClient(system_database_url=url, dbos_system_schema=schema)
        options: EnqueueOptions = {"queue_name": "bench", "workflow_name": "flow"}
        for seed in range(number):
            client.enqueue(options, seed)
        client.destroy()
        print("enqueued", flush=True)
        return

    @DBOS.step()
    def step(index: int, total: int) -> int:
        return total + index

    @DBOS.workflow(name="flow")
    def flow(seed: int) -> int:
        total = seed
        for index in range(STEPS):
            total = step(index, total)
        return total

    DBOS(config=_config(url, schema))
    DBOS.launch()
    # Polled every 0.1 s (not the default 1 s) so that a queue's latency does not bound
    # the throughput measured.
    DBOS.register_queue("bench", worker_concurrency=number, polling_interval_sec=0.1)
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
