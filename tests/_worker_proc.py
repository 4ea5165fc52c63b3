"""A worker process for the tests: ``python tests/_worker_proc.py URL [options]``.

It runs :func:`loopwarden.worker.run_worker` with the options given, writes loopwarden's log
events as JSON lines to ``--log`` (the tests read the claim/release events from it), and prints
its report as one JSON object on stdout when it stops.
"""

from __future__ import annotations

import argparse
import json
import sys

from loopwarden.logs import configure_logging
from loopwarden.worker import run_worker


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    parser.add_argument("--poll", type=float, default=0.1)
    parser.add_argument("--exit-when-idle", action="store_true")
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    with open(args.log, "a", encoding="utf-8", buffering=1) as log:
        configure_logging("json", "info", stream=log)
        report = run_worker(
            args.url,
            concurrency=args.concurrency,
            lease_ttl=args.lease_ttl,
            poll_interval=args.poll,
            exit_when_idle=args.exit_when_idle,
        )
    json.dump(report.to_dict(), sys.stdout)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
