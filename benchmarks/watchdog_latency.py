"""How fast the watchdog pages a dead scheduler: SIGKILL to alert at a local webhook, real Airflow.

One command, not part of the test suite (a few minutes)::

    python -m benchmarks.watchdog_latency            # 3 kills, the watchdog's default settings
    python -m benchmarks.watchdog_latency --kills 5 --interval 5

Boots an idle Airflow once (api-server, scheduler, dag-processor; PostgreSQL metadata), runs
``airflow-crashsafe watch`` beside it with a generic webhook sink, then N times: SIGKILL the
scheduler, time the page's arrival, restart it, wait for the resolve. Prints each kill, then the
median and max SIGKILL -> alert seconds. Expect about threshold - (heartbeat age at the kill) +
up to one poll interval.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from drill.stack import AirflowStack
from drill.watch import WatchdogProcess, WebhookReceiver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.watchdog_latency", description=__doc__)
    parser.add_argument("--kills", type=int, default=3, help="scheduler kills (default 3)")
    parser.add_argument("--interval", type=float, help="watchdog poll interval (default: its own, 10 s)")
    parser.add_argument("--workdir", help="parent of the temporary AIRFLOW_HOME")
    args = parser.parse_args(argv)
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", flush=True)

    stack = AirflowStack(args.workdir)
    receiver = WebhookReceiver()
    dog: WatchdogProcess | None = None
    latencies: list[float] = []
    try:
        say("booting Airflow (PostgreSQL metadata, api-server, scheduler, dag-processor)")
        stack.start()
        options = ["--interval", str(args.interval)] if args.interval else []
        dog = WatchdogProcess(stack.api_url, receiver.url, stack.home.logs, options=options).start()
        say(f"healthy; watchdog pid {dog.pid} ({' '.join(options) or 'default settings'})")
        time.sleep(3)
        for n in range(1, args.kills + 1):
            killed = stack.crash("scheduler")
            alert = receiver.wait_for("trigger", "scheduler_dead", after=killed, timeout=180)
            if alert is None:
                say(f"kill {n}: NO ALERT within 180 s")
                return 1
            latencies.append(alert.at - killed)
            restarted = stack.restart("scheduler")
            resolve = receiver.wait_for("resolve", "scheduler_dead", after=restarted, timeout=180)
            back = f"{resolve.at - restarted:.1f} s" if resolve else "no resolve in 180 s"
            say(f"kill {n}: SIGKILL -> alert {latencies[-1]:.1f} s; restart -> resolve {back}")
            stack.wait_healthy()
        print(
            f"SIGKILL -> alert over {len(latencies)} kills: median {statistics.median(latencies):.1f} s, "
            f"max {max(latencies):.1f} s"
        )
        return 0
    finally:
        if dog is not None:
            dog.stop()
        receiver.close()
        left = stack.close()
        say("cleanup done: no process left" if not left else f"cleanup: {left} processes left")


if __name__ == "__main__":
    sys.exit(main())
