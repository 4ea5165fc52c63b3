"""Benchmark of loopwarden on PostgreSQL: one durable transition against the server's floor,
and the throughput of 1, 2 and 4 worker processes.

    python bench/bench_workers.py [--quick] [--url URL] [--json out.json]

Without ``--url`` (or LOOPWARDEN_TEST_PG_URL) it starts a throwaway cluster on 127.0.0.1 with
PostgreSQL's default durability (fsync on, synchronous_commit on), the way the tests' fixture
does, and removes it after. Everything is measured in one run against one server.

1. The floor: a ~500-byte row INSERTed and committed on a plain psycopg connection, as one
   autocommit statement (one round trip) and as BEGIN; INSERT; COMMIT (three), next to one
   durable loopwarden transition (``LoopEngine._commit``: BEGIN, the fenced UPDATE of the loop
   row, the checkpoint INSERT, COMMIT), interleaved round by round; medians and their ratios.
2. Workers: N loops queued with ``enqueue`` (two iterations each: seven transitions and two
   agent runs), drained by 1, 2 and 4 worker processes (``concurrency=1`` each); loops/s and
   transitions/s between the first claim and the last release. Once with an agent that
   returns at once (the engine's own overhead) and once with an agent that takes 100 ms (a
   stand-in for real agents, which take seconds to minutes).

Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import postgres_fixture  # noqa: E402
from loopwarden import Decision, LoopConfig, LoopEngine, Signal, State  # noqa: E402
from loopwarden.worker import enqueue  # noqa: E402

PAYLOAD = "x" * 500
DATA = {"output": PAYLOAD[:400], "files_modified": ["a.py"]}
CONTINUE = Decision(Signal.CONTINUE, State.EXECUTING, 1, 100.0, "r")
WORKER = HERE.parent / "tests" / "_worker_proc.py"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Floor:
    """The cheapest durable write on this server: a 500-byte row and a commit."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url.replace("+psycopg", ""), autocommit=True)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_raw (id bigint PRIMARY KEY, data text NOT NULL)"
        )
        self.i = 0

    def autocommit(self) -> None:
        self.i += 1
        self.conn.execute(
            "INSERT INTO bench_raw (id, data) VALUES (%s, %s)", (self.i, PAYLOAD), prepare=True
        )

    def transaction(self) -> None:
        self.i += 1
        self.conn.execute("BEGIN")
        self.conn.execute(
            "INSERT INTO bench_raw (id, data) VALUES (%s, %s)", (self.i, PAYLOAD), prepare=True
        )
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class Transition:
    """A held loop stepped submit -> evaluate -> decide by the engine's fenced commit."""

    CYCLE = ("submit", "evaluate", "decide")

    def __init__(self, url: str) -> None:
        import structlog

        self.engine = LoopEngine(url, logger=structlog.get_logger().bind())
        snap = self.engine.start("bench", LoopConfig(max_iterations=10**9), prompt="p" * 200)
        self._hold = self.engine.hold(snap.id)
        self._hold.__enter__()
        self.loop = self.engine._held[snap.id]
        self.i = 0

    def one(self) -> None:
        trigger = self.CYCLE[self.i % 3]
        self.i += 1
        kwargs: dict[str, Any] = {}
        if trigger == "decide":
            kwargs["machine_kwargs"] = {"decision": CONTINUE}
        self.loop = self.engine._commit(self.loop, trigger, DATA, **kwargs)

    def close(self) -> None:
        self._hold.__exit__(None, None, None)
        self.engine.close()


def timed(fn: Any, n: int) -> list[float]:
    out = []
    clock = time.perf_counter
    for _ in range(n):
        t = clock()
        fn()
        out.append(clock() - t)
    return out


def bench_floor(url: str, rounds: int, per_round: int) -> dict[str, Any]:
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    floor, transition = Floor(url), Transition(url)
    variants = {
        "insert_autocommit": floor.autocommit,
        "begin_insert_commit": floor.transaction,
        "durable_transition": transition.one,
    }
    for fn in variants.values():  # warm up: psycopg prepares after a few runs
        timed(fn, 30)
    per: dict[str, list[float]] = {k: [] for k in variants}
    ratios: dict[str, list[float]] = {"vs_autocommit": [], "vs_transaction": []}
    names = list(variants)
    for r in range(rounds):
        medians = {}
        for name in names[r % 3 :] + names[: r % 3]:
            samples = timed(variants[name], per_round)
            per[name].extend(samples)
            medians[name] = statistics.median(samples)
        ratios["vs_autocommit"].append(medians["durable_transition"] / medians["insert_autocommit"])
        ratios["vs_transaction"].append(
            medians["durable_transition"] / medians["begin_insert_commit"]
        )
    floor.close()
    transition.close()
    return {
        "median_us": {k: statistics.median(v) * 1e6 for k, v in per.items()},
        "p90_us": {k: statistics.quantiles(v, n=10)[-1] * 1e6 for k, v in per.items()},
        "ratio": {k: statistics.median(v) for k, v in ratios.items()},
        "n": {k: len(v) for k, v in per.items()},
    }


AGENT = (
    'if [ "$LOOPWARDEN_ITERATION" -ge 2 ]; then echo "<promise>COMPLETE</promise>"; '
    "else echo working; fi"
)


def bench_workers(
    server: postgres_fixture.PgServer, n_workers: int, loops: int, sleep: float, tmp: Path
) -> dict[str, Any]:
    url = server.create_database()
    try:
        engine = LoopEngine(url)
        agent = (f"sleep {sleep}; " if sleep else "") + AGENT
        config = LoopConfig(max_iterations=4)
        ids = [
            enqueue(engine, "bench", config, prompt="p", agent=agent, shell=True).id
            for _ in range(loops)
        ]
        logs = [tmp / f"w{n_workers}-{sleep}-{i}.log" for i in range(n_workers)]
        started = time.perf_counter()
        procs = [
            subprocess.Popen(
                [sys.executable, str(WORKER), url, "--log", str(p), "--exit-when-idle"],
                stdout=subprocess.PIPE,
            )
            for p in logs
        ]
        reports = [json.loads(p.communicate()[0]) for p in procs]
        wall = time.perf_counter() - started
        done = sum(engine.get(i).state is State.COMPLETED for i in ids)
        engine.close()
        claims, releases = [], []
        for p in logs:
            for line in p.read_text().splitlines():
                event = json.loads(line)
                if event.get("event") == "loop_claimed":
                    claims.append(float(event["at"]))
                elif event.get("event") == "loop_released":
                    releases.append(float(event["at"]))
        span = max(releases) - min(claims)
        return {
            "workers": n_workers,
            "agent_sleep_s": sleep,
            "loops": loops,
            "completed": done,
            "span_s": span,
            "wall_s": wall,
            "loops_per_s": loops / span,
            "transitions_per_s": loops * 7 / span,
            "per_worker": [r["loops_finished"] for r in reports],
        }
    finally:
        server.drop_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and loops")
    parser.add_argument("--url", default=os.environ.get(postgres_fixture.ENV))
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    if args.url:
        server = postgres_fixture.PgServer(args.url)
        where = "the server at --url / LOOPWARDEN_TEST_PG_URL"
    else:
        bindir = postgres_fixture.find_bindir()
        if bindir is None:
            raise SystemExit("no PostgreSQL: pass --url or install postgresql")
        server = postgres_fixture.start_cluster(bindir, durable=True)
        where = f"a throwaway cluster of {bindir} on 127.0.0.1 (fsync on, synchronous_commit on)"
    results: dict[str, Any] = {"server": where, "machine": platform.platform()}
    try:
        with psycopg.connect(server.url.replace("+psycopg", "")) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            results["server_version"] = row[0] if row else "?"
            for name in ("fsync", "synchronous_commit"):
                row = conn.execute(f"SHOW {name}").fetchone()
                results[name] = row[0] if row else "?"
        log("[1/2] durable transition against INSERT + COMMIT")
        url = server.create_database()
        try:
            results["floor"] = bench_floor(url, 6 if args.quick else 12, 100 if args.quick else 200)
        finally:
            server.drop_database(url)
        log("[2/2] worker throughput")
        results["workers"] = []
        with tempfile.TemporaryDirectory(prefix="lw-bench-") as tmp:
            for sleep, loops in (
                (0.0, 100 if args.quick else 300),
                (0.1, 16 if args.quick else 40),
            ):
                for n in (1, 2, 4):
                    r = bench_workers(server, n, loops, sleep, Path(tmp))
                    rate = r["loops_per_s"]
                    log(f"  {n} worker(s), agent {sleep * 1000:.0f} ms: {rate:.1f} loops/s")
                    results["workers"].append(r)
    finally:
        server.stop()
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def report(r: dict[str, Any]) -> str:
    f = r["floor"]
    m, p90 = f["median_us"], f["p90_us"]
    lines = [
        f"PostgreSQL {r['server_version']} (fsync={r['fsync']}, "
        f"synchronous_commit={r['synchronous_commit']}); {r['machine']}",
        "",
        "| operation | median µs | p90 µs |",
        "|---|---:|---:|",
        f"| INSERT 500 B, autocommit (1 round trip) | {m['insert_autocommit']:.0f} "
        f"| {p90['insert_autocommit']:.0f} |",
        f"| BEGIN; INSERT 500 B; COMMIT (3 round trips) | {m['begin_insert_commit']:.0f} "
        f"| {p90['begin_insert_commit']:.0f} |",
        f"| durable transition (BEGIN; fenced UPDATE; INSERT checkpoint; COMMIT) "
        f"| {m['durable_transition']:.0f} | {p90['durable_transition']:.0f} |",
        "",
        f"durable transition / autocommit INSERT: {f['ratio']['vs_autocommit']:.2f}x; "
        f"/ BEGIN-INSERT-COMMIT: {f['ratio']['vs_transaction']:.2f}x "
        "(medians of per-round ratios)",
        "",
        "| agent | workers | loops | loops/s | transitions/s | speed-up | loops per worker |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    base: dict[float, float] = {}
    for w in r["workers"]:
        base.setdefault(w["agent_sleep_s"], w["loops_per_s"])
        agent = "instant" if not w["agent_sleep_s"] else f"{w['agent_sleep_s'] * 1000:.0f} ms"
        lines.append(
            f"| {agent} | {w['workers']} | {w['completed']}/{w['loops']} | "
            f"{w['loops_per_s']:.1f} | {w['transitions_per_s']:.0f} | "
            f"{w['loops_per_s'] / base[w['agent_sleep_s']]:.2f}x | {w['per_worker']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
