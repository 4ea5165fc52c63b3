"""Benchmark of loopwarden's durable core against the raw SQLite floor, in one run, on one disk.

    python bench/bench_core.py [--quick] [--json out.json] [--dir DIR] [--keep]

What it measures (all databases live in one temporary directory, so on one filesystem):

1. raw floor: plain ``sqlite3`` INSERT + COMMIT of a 500-byte row (WAL, synchronous=NORMAL);
2. one durable transition: ``LoopEngine._commit`` on a held loop cycling
   submit -> evaluate -> decide(CONTINUE) with 500 bytes of checkpoint data, with logging
   filtered at WARNING and again with INFO JSON logging into /dev/null; next to it the same
   transaction's SQL issued directly through ``sqlite3`` (BEGIN IMMEDIATE + fenced UPDATE of
   lw_loops + INSERT of the checkpoint + COMMIT), and two hypothetical cheaper statement shapes;
3. a full iteration through the public API: ``engine.submit`` with no rules / one pattern rule;
4. ``engine.resume`` on a fresh LoopEngine (lease acquire + release included) of loops at 10
   and at 10,000 iterations, left in executing, deciding and validating; ``engine.get``;
5. bytes per iteration at 100 and at 10,000 iterations;
6. where one durable transition's time goes: a phase-timed copy of ``_commit`` and a cProfile
   summary.

Measurements that are compared are interleaved round by round (the machine may be shared and
noisy); the table reports medians and ratios computed within this one run. Not a test: nothing
here asserts a target; the targets are printed next to the measured ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import os
import platform
import pstats
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import structlog

import loopwarden
from loopwarden import Decision, LoopConfig, LoopEngine, Signal, State, machine, rules
from loopwarden import engine as engine_mod
from loopwarden.store import SCHEMA_VERSION

PAYLOAD = 500  # bytes of checkpoint data / raw row
PROMPT = "Fix the parser so that every test in tests/test_parser.py passes. " * 3
CONTEXT = {"branch": "main", "ticket": "BENCH-1"}
CONTINUE = Decision(Signal.CONTINUE, State.EXECUTING, 1, 100.0, "r")
BIG_CONFIG = {"max_iterations": 10**9}


def _data(size: int = PAYLOAD) -> dict[str, Any]:
    """A checkpoint data object whose compact JSON is exactly ``size`` bytes."""
    base = len(engine_mod._dumps({"output": ""}))
    return {"output": "x" * (size - base)}


DATA = _data()
ROW = "x" * PAYLOAD
OUTPUT = ("The parser now handles nested brackets; all tests pass. " * 10)[:PAYLOAD]
assert len(engine_mod._dumps(DATA)) == PAYLOAD


# ----- statistics ------------------------------------------------------------------------------


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


class Series:
    """Per-operation samples (µs), grouped by the round they were taken in."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rounds: list[list[float]] = []

    def add(self, samples_ns: list[int]) -> None:
        self.rounds.append([s / 1000 for s in samples_ns])

    @property
    def samples(self) -> list[float]:
        return [s for r in self.rounds for s in r]

    def summary(self) -> dict[str, Any]:
        s = self.samples
        rm = [median(r) for r in self.rounds if r]
        return {
            "median_us": median(s),
            "mean_us": statistics.fmean(s) if s else float("nan"),
            "p10_us": pct(s, 0.10),
            "p90_us": pct(s, 0.90),
            "n": len(s),
            "rounds": len(self.rounds),
            "round_median_min_us": min(rm) if rm else None,
            "round_median_max_us": max(rm) if rm else None,
        }


def paired_ratio(a: Series, b: Series) -> float:
    """Median over rounds of (median of a in the round / median of b in the same round)."""
    ratios = [
        median(ra) / median(rb) for ra, rb in zip(a.rounds, b.rounds, strict=False) if ra and rb
    ]
    return median(ratios)


def run_rounds(
    benches: dict[str, Callable[[int], list[int]]], rounds: int, batch: int
) -> dict[str, Series]:
    """Run every bench ``rounds`` times, rotating the order each round (interleaving)."""
    series = {name: Series(name) for name in benches}
    names = list(benches)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            gc.collect()
            series[name].add(benches[name](batch))
    return series


# ----- environment -----------------------------------------------------------------------------


def _filesystem(path: Path) -> dict[str, str]:
    best = ("", "?", "?")
    with contextlib.suppress(OSError), open("/proc/mounts") as fh:
        for line in fh:
            dev, mnt, fstype = line.split()[:3]
            if str(path).startswith(mnt) and len(mnt) >= len(best[0]):
                best = (mnt, dev, fstype)
    return {"mount": best[0], "device": best[1], "fstype": best[2]}


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def _version(dist: str) -> str:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return "?"


def _git_rev() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return rev + ("+dirty(src)" if dirty else "")


def environment(workdir: Path) -> dict[str, Any]:
    return {
        "nproc": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "sqlalchemy": _version("sqlalchemy"),
        "transitions": _version("transitions"),
        "structlog": _version("structlog"),
        "loopwarden": _version("loopwarden"),
        "git": _git_rev(),
        "kernel": platform.release(),
        "workdir": str(workdir),
        "filesystem": _filesystem(workdir),
        "loadavg_start": os.getloadavg(),
    }


# ----- loggers ---------------------------------------------------------------------------------


def make_loggers() -> tuple[Any, Any, Any]:
    """(warning-filtered logger, INFO JSON logger into /dev/null, the /dev/null stream).

    Both are assembled through ``loopwarden.configure_logging`` and frozen with ``bind()``, so
    engines using either can be interleaved; the global configuration is left at WARNING.
    """
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives for the whole run
    loopwarden.configure_logging(fmt="json", level="info", stream=devnull)
    json_logger = structlog.get_logger("loopwarden").bind()
    loopwarden.configure_logging(level="warning")
    warn_logger = structlog.get_logger("loopwarden").bind()
    return warn_logger, json_logger, devnull


# ----- 1. the raw floor ------------------------------------------------------------------------


def sqlite_connect(path: Path, *, autocommit: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None if autocommit else "")
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def raw_floor_bench(
    path: Path, synchronous: str = "NORMAL"
) -> tuple[Callable[[int], list[int]], sqlite3.Connection]:
    conn = sqlite_connect(path, autocommit=False)  # Python's default: implicit BEGIN
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS raw (id INTEGER PRIMARY KEY, data TEXT NOT NULL)")
    conn.commit()
    clock = time.perf_counter_ns

    def bench(n: int) -> list[int]:
        out = []
        execute, commit, row = conn.execute, conn.commit, (ROW,)
        for _ in range(n):
            t = clock()
            execute("INSERT INTO raw (data) VALUES (?)", row)
            commit()
            out.append(clock() - t)
        return out

    return bench, conn


# ----- 2. one durable transition ---------------------------------------------------------------


class CommitCycler:
    """A held loop on its own engine, stepped submit -> evaluate -> decide by ``_commit``."""

    CYCLE = ("submit", "evaluate", "decide")

    def __init__(
        self, path: Path, logger: Any, *, scores: int = 0, synchronous: str = "NORMAL"
    ) -> None:
        self.engine = LoopEngine(str(path), logger=logger)
        if synchronous != "NORMAL":
            self.engine.db._driver.execute(f"PRAGMA synchronous = {synchronous}")
        snap = self.engine.start("bench", LoopConfig(**BIG_CONFIG), prompt=PROMPT, context=CONTEXT)
        self.loop_id = snap.id
        self._hold = self.engine.hold(self.loop_id)
        self._hold.__enter__()
        self.loop = self.engine._held[self.loop_id]
        if scores:
            # the loop row of a loop past iteration ``scores``: the engine keeps up to 50 scores
            # on the row and serialises them on every transition
            self.loop = replace(self.loop, scores=(100.0,) * scores)
        self.i = 0
        self.by_trigger: dict[str, list[int]] = {t: [] for t in self.CYCLE}

    def one(self) -> None:
        trigger = self.CYCLE[self.i % 3]
        self.i += 1
        if trigger == "decide":
            self.loop = self.engine._commit(
                self.loop, "decide", DATA, machine_kwargs={"decision": CONTINUE}
            )
        else:
            self.loop = self.engine._commit(self.loop, trigger, DATA)

    def bench(self, n: int) -> list[int]:
        out = []
        clock = time.perf_counter_ns
        for _ in range(n):
            trigger = self.CYCLE[self.i % 3]
            t = clock()
            self.one()
            dt = clock() - t
            out.append(dt)
            self.by_trigger[trigger].append(dt)
        return out

    def close(self) -> None:
        self._hold.__exit__(None, None, None)
        self.engine.close()


class RawTransition:
    """The SQL of one transition, issued straight through ``sqlite3`` on a loopwarden database.

    Same statements, same parameter values as ``_commit`` (taken from the engine's prepared
    statements and a real loop row); the phases BEGIN / UPDATE / INSERT / COMMIT are timed
    separately.
    """

    def __init__(self, path: Path, warn_logger: Any) -> None:
        with LoopEngine(str(path), logger=warn_logger) as eng:
            snap = eng.start("bench", LoopConfig(**BIG_CONFIG), prompt=PROMPT, context=CONTEXT)
            upd, ins = eng.db._q["update_loop"], eng.db._q["insert_checkpoint"]
            self.update_sql, self.update_names = upd.sql, upd.names
            self.insert_sql, self.insert_names = ins.sql, ins.names
            loop = eng._held.get(snap.id) or eng._load(snap.id)[0]
            columns = loop.columns()
        self.loop_id = snap.id
        self.conn = sqlite_connect(path, autocommit=True)
        self.owner = "raw-bench-owner:12345:abcdef01"
        self.conn.execute(
            "UPDATE lw_loops SET lease_owner = ?, lease_epoch = lease_epoch + 1 WHERE id = ?",
            (self.owner, self.loop_id),
        )
        self.epoch, self.seq = self.conn.execute(
            "SELECT lease_epoch, seq FROM lw_loops WHERE id = ?", (self.loop_id,)
        ).fetchone()
        self.cp_seq = self.seq
        base = dict(columns)
        base.update(id_=self.loop_id, owner_=self.owner, epoch_=self.epoch)
        assert self.update_names is not None
        assert self.insert_names is not None
        self.template = [base.get(n) for n in self.update_names]
        self.ix = {
            n: self.update_names.index(n)
            for n in ("seq", "old_seq_", "updated_at", "lease_expires", "state")
        }
        self.data_json = engine_mod._dumps(DATA)
        self.phases: dict[str, list[int]] = {"begin": [], "update": [], "insert": [], "commit": []}

    def _params(self, state: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """Parameters of the next fenced UPDATE (applied or not) and checkpoint INSERT."""
        now = time.time()
        p = self.template
        ix = self.ix
        p[ix["seq"]] = self.seq + 1
        p[ix["old_seq_"]] = self.seq
        p[ix["updated_at"]] = now
        p[ix["lease_expires"]] = now + 60.0
        p[ix["state"]] = state
        self.cp_seq += 1
        cp = (
            self.loop_id,
            self.cp_seq,
            state,
            1,
            "submit",
            SCHEMA_VERSION,
            now,
            self.owner,
            self.data_json,
        )
        return tuple(p), cp

    def bench(self, n: int) -> list[int]:
        out = []
        clock = time.perf_counter_ns
        execute = self.conn.execute
        ph = self.phases
        states = ("validating", "deciding", "executing")
        for i in range(n):
            params, cp = self._params(states[i % 3])
            t0 = clock()
            execute("BEGIN IMMEDIATE")
            t1 = clock()
            cur = execute(self.update_sql, params)
            t2 = clock()
            if cur.rowcount != 1:
                raise RuntimeError("fenced UPDATE matched no row")
            self.seq += 1
            execute(self.insert_sql, cp)
            t3 = clock()
            execute("COMMIT")
            t4 = clock()
            ph["begin"].append(t1 - t0)
            ph["update"].append(t2 - t1)
            ph["insert"].append(t3 - t2)
            ph["commit"].append(t4 - t3)
            out.append(t4 - t0)
        return out

    def bench_insert_only(self, n: int) -> list[int]:
        """BEGIN IMMEDIATE + INSERT checkpoint + COMMIT: the loop row not rewritten."""
        out = []
        clock = time.perf_counter_ns
        execute = self.conn.execute
        for _ in range(n):
            _params, cp = self._params("executing")
            t0 = clock()
            execute("BEGIN IMMEDIATE")
            execute(self.insert_sql, cp)
            execute("COMMIT")
            out.append(clock() - t0)
        return out

    FENCED_INSERT = (
        'INSERT INTO lw_checkpoints (loop_id, seq, state, iteration, "trigger", '
        "schema_version, created_at, owner, data) "
        "SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM lw_loops "
        "WHERE id = ? AND lease_owner = ? AND lease_epoch = ?)"
    )

    def bench_fenced_insert(self, n: int) -> list[int]:
        """A hypothetical one-statement fenced write in autocommit: INSERT ... SELECT ... WHERE
        EXISTS(lease still ours). The state would then be read from the last checkpoint."""
        out = []
        clock = time.perf_counter_ns
        execute = self.conn.execute
        sql = self.FENCED_INSERT
        fence = (self.loop_id, self.owner, self.epoch)
        for _ in range(n):
            _params, cp = self._params("executing")
            args = cp + fence
            t0 = clock()
            cur = execute(sql, args)
            out.append(clock() - t0)
            if cur.rowcount != 1:
                raise RuntimeError("fenced INSERT matched no row")
        return out


def phased_commit(
    eng: LoopEngine,
    loop: Any,
    trigger: str,
    data: dict[str, Any],
    phases: dict[str, list[int]],
    **changes: Any,
) -> Any:
    """A copy of ``LoopEngine._commit`` with a clock between its phases (no profiler distortion).

    Kept line for line with engine.py at the time of writing; its total is printed next to the
    real ``_commit`` so a drift between the two shows.
    """
    clock = time.perf_counter_ns
    t0 = clock()
    started = time.perf_counter()
    machine_kwargs = changes.pop("machine_kwargs", {})
    dest = machine.step(loop.id, loop.state, trigger, **machine_kwargs)
    t1 = clock()
    now = time.time()
    new = replace(loop, state=dest, seq=loop.seq + 1, updated_at=now, **changes)
    t2 = clock()
    params = new.columns()
    params.update(
        id_=loop.id,
        owner_=eng.owner,
        epoch_=loop.epoch,
        old_seq_=loop.seq,
        lease_expires=now + eng.lease_ttl,
    )
    t3 = clock()
    checkpoint = {
        "loop_id": loop.id,
        "seq": new.seq,
        "state": dest.value,
        "iteration": new.iteration,
        "trigger": trigger,
        "schema_version": SCHEMA_VERSION,
        "created_at": now,
        "owner": eng.owner,
        "data": engine_mod._dumps(data),
    }
    t4 = clock()
    with eng.db.transaction():
        if eng.db.execute("update_loop", params) != 1:
            raise RuntimeError("fenced")
        eng.db.execute("insert_checkpoint", checkpoint)
    t5 = clock()
    eng._held[loop.id] = new
    eng._log.info(
        "transition",
        loop_id=loop.id,
        task_id=loop.task_id,
        iteration=new.iteration,
        from_state=loop.state.value,
        to_state=dest.value,
        trigger=trigger,
        signal=None,
        reason=new.reason if dest.terminal else data.get("reason"),
        seq=new.seq,
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
    )
    t6 = clock()
    for key, a, b in (
        ("machine.step", t0, t1),
        ("dataclasses.replace", t1, t2),
        ("columns() + fence params", t2, t3),
        ("checkpoint dict + json.dumps", t3, t4),
        ("SQL via Database (BEGIN..COMMIT)", t4, t5),
        ("log call + bookkeeping", t5, t6),
        ("total", t0, t6),
    ):
        phases.setdefault(key, []).append(b - a)
    return new


def profile_commit(path: Path, logger: Any, n: int) -> dict[str, Any]:
    """cProfile of ``n`` _commit calls, grouped into categories by where the code lives."""
    cyc = CommitCycler(path, logger)
    for _ in range(300):
        cyc.one()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        cyc.one()
    prof.disable()
    cyc.close()
    stats = pstats.Stats(prof)
    cats: dict[str, float] = {}
    top: list[tuple[float, int, str]] = []
    total = 0.0
    for (fname, line, func), (_cc, nc, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        total += tt
        cat = _category(fname, func)
        cats[cat] = cats.get(cat, 0.0) + tt
        short = f"{Path(fname).name}:{line}({func})" if fname != "~" else func
        top.append((tt, nc, short))
    top.sort(reverse=True)
    return {
        "calls": n,
        "total_us_per_commit": total / n * 1e6,
        "categories": {
            k: {"us_per_commit": v / n * 1e6, "share": v / total}
            for k, v in sorted(cats.items(), key=lambda kv: -kv[1])
        },
        "top_functions": [
            {"function": name, "calls_per_commit": nc / n, "self_us_per_commit": tt / n * 1e6}
            for tt, nc, name in top[:20]
        ],
    }


def _category(fname: str, func: str) -> str:
    if fname == "~":
        if "sqlite3.Connection" in func or "sqlite3.Cursor" in func:
            return "sqlite3 (C: execute/fetch)"
        if "__setattr__" in func:
            return "dataclass replace/__init__"
        if "json" in func or "encode" in func:
            return "json (C encoder)"
        return "other builtins"
    path = fname.replace("\\", "/")
    if "/transitions/" in path:
        return "transitions library"
    if path.endswith("loopwarden/machine.py"):
        return "loopwarden machine.step"
    if "/json/" in path:
        return "json (Python wrappers)"
    if "/structlog/" in path:
        return "structlog"
    if path.endswith("dataclasses.py") or path == "<string>":
        return "dataclass replace/__init__"
    if path.endswith("store/database.py"):
        return "Database wrappers (lock, bind, rowcount)"
    if path.endswith("contextlib.py"):
        return "contextlib (transaction ctx manager)"
    if path.endswith("enum.py"):
        return "enum (.value, State(...))"
    if path.endswith("loopwarden/engine.py"):
        return "engine._commit body, columns(), _dumps"
    if path.endswith("threading.py"):
        return "threading"
    return "other Python"


# ----- 3. full iteration -----------------------------------------------------------------------


class Submitter:
    def __init__(self, eng: LoopEngine, config: LoopConfig) -> None:
        self.engine = eng
        snap = eng.start("bench", config, prompt=PROMPT, context=CONTEXT)
        self.loop_id = snap.id
        self._hold = eng.hold(self.loop_id)
        self._hold.__enter__()

    def bench(self, n: int) -> list[int]:
        out = []
        clock = time.perf_counter_ns
        submit, loop_id = self.engine.submit, self.loop_id
        for _ in range(n):
            t = clock()
            d = submit(loop_id, OUTPUT)
            out.append(clock() - t)
        assert d.signal is Signal.CONTINUE, d
        return out

    def close(self) -> None:
        self._hold.__exit__(None, None, None)


SUBMIT_PARTS = (
    "submit",
    "_commit",
    "_validate",
    "_decide",
    "_checkpoint_data",
    "evaluate_all",
    "detect_promises",
    "decide",
    "next_counters",
    "to_dict",
    "compose_prompt",
    "columns",
    "step",
    "replace",
    "_dumps",
    "transaction",
    "execute",
    "fetch_one",
)


def profile_submit(eng: LoopEngine, config: LoopConfig, n: int) -> dict[str, Any]:
    """Cumulative time per submit of the engine's main steps, under cProfile."""
    sub = Submitter(eng, config)
    sub.bench(60)  # past the 50-score window
    prof = cProfile.Profile()
    prof.enable()
    sub.bench(n)
    prof.disable()
    sub.close()
    stats = pstats.Stats(prof)
    parts: dict[str, dict[str, float]] = {}
    for (fname, line, func), (_cc, nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        path = fname.replace("\\", "/")
        if func not in SUBMIT_PARTS:
            continue
        if "/loopwarden/" in path:
            where = path.split("/loopwarden/", 1)[1]
        elif path.endswith("dataclasses.py"):
            where = "dataclasses"
        else:
            continue
        key = f"{where}:{line}({func})"
        parts[key] = {"calls_per_submit": nc / n, "cum_us_per_submit": ct / n * 1e6}
    return dict(sorted(parts.items(), key=lambda kv: -kv[1]["cum_us_per_submit"]))


# ----- 4. resume -------------------------------------------------------------------------------


class _Killed(Exception):
    """Stands for SIGKILL between two commits of one iteration."""


class _KillBeforeDecide(LoopEngine):
    def _decide(self, loop: Any, evidence: Any) -> Any:
        raise _Killed


class _KillBeforeValidate(LoopEngine):
    def _validate(self, loop: Any) -> Any:
        raise _Killed


def build_loop(
    eng: LoopEngine,
    iterations: int,
    probe: Callable[[int], None] | None = None,
    probe_at: tuple[int, ...] = (),
) -> str:
    snap = eng.start("bench", LoopConfig(**BIG_CONFIG), prompt=PROMPT, context=CONTEXT)
    with eng.hold(snap.id):
        if probe and 0 in probe_at:
            probe(0)
        for i in range(1, iterations + 1):
            d = eng.submit(snap.id, OUTPUT)
            if probe and i in probe_at:
                probe(i)
        assert d.signal is Signal.CONTINUE
    return snap.id


def leave_in(killer: LoopEngine, loop_id: str) -> None:
    with contextlib.suppress(_Killed):
        killer.submit(loop_id, OUTPUT)


# ----- 5. bytes --------------------------------------------------------------------------------


def db_bytes(path: Path, loop_id: str, first: int, last: int) -> dict[str, Any]:
    """File size after a WAL checkpoint, page bytes per table (dbstat), and the loop's stored
    bytes for iterations first..last."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        busy, _log, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        size = path.stat().st_size
        tables = {
            name: {"pages_bytes": pg, "payload_bytes": pl}
            for name, pg, pl in conn.execute(
                "SELECT name, SUM(pgsize), SUM(payload) FROM dbstat GROUP BY name"
            )
        }
        cp = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(data AS BLOB))), 0), "
            'COALESCE(SUM(LENGTH(loop_id) + LENGTH(owner) + LENGTH(state) + LENGTH("trigger")'
            " + 8 * 4), 0) FROM lw_checkpoints WHERE loop_id = ? AND iteration BETWEEN ? AND ?",
            (loop_id, first, last),
        ).fetchone()
        it = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(decision AS BLOB))), 0), "
            "COALESCE(SUM(LENGTH(loop_id) + LENGTH(signal) + 8 * 8), 0) "
            "FROM lw_iterations WHERE loop_id = ? AND iteration BETWEEN ? AND ?",
            (loop_id, first, last),
        ).fetchone()
    finally:
        conn.close()
    return {
        "wal_checkpoint_busy": busy,
        "file_bytes": size,
        "tables": tables,
        "checkpoint_rows": cp[0],
        "checkpoint_data_bytes": cp[1],
        "checkpoint_other_bytes_approx": cp[2],
        "iteration_rows": it[0],
        "iteration_decision_bytes": it[1],
        "iteration_other_bytes_approx": it[2],
    }


def wal_frames_per_op(path: Path, op: Callable[[], None], k: int) -> float:
    """WAL frames (pages) written per operation, counted from an emptied WAL."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for _ in range(k):
            op()
        _busy, frames, _done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        conn.close()
    return frames / k


# ----- the run ---------------------------------------------------------------------------------


def run(quick: bool, workdir: Path) -> dict[str, Any]:
    cfg = {
        "rounds": 7 if quick else 40,
        "batch": 150 if quick else 600,
        "batch_full": 20 if quick else 60,
        "submit_rounds": 5 if quick else 30,
        "submit_batch": 40 if quick else 150,
        "big": 10_000,
        "small": 10,
        "resume_reps": 8 if quick else 80,
        "get_reps": 200 if quick else 2000,
        "profile_commits": 1500 if quick else 6000,
        "phase_cycles": 500 if quick else 3000,
    }
    res: dict[str, Any] = {"mode": "quick" if quick else "full", "config": cfg}
    res["environment"] = environment(workdir)
    warn_logger, json_logger, devnull = make_loggers()
    t_start = time.perf_counter()

    # -- 1+2: raw floor vs one durable transition, interleaved --------------------------------
    log("[1/6] raw floor vs one durable transition (interleaved rounds)")
    raw_bench, raw_conn = raw_floor_bench(workdir / "raw.db")
    cyc_warn = CommitCycler(workdir / "commit_warn.db", warn_logger)
    cyc_json = CommitCycler(workdir / "commit_json.db", json_logger)
    cyc_50 = CommitCycler(workdir / "commit_50.db", warn_logger, scores=50)
    rawt = RawTransition(workdir / "raw_transition.db", warn_logger)
    benches = {
        "raw_floor": raw_bench,
        "commit_warn": cyc_warn.bench,
        "commit_json": cyc_json.bench,
        "commit_warn_50_scores": cyc_50.bench,
        "raw_transition_sql": rawt.bench,
        "alt_insert_only_sql": rawt.bench_insert_only,
        "alt_fenced_insert_select_sql": rawt.bench_fenced_insert,
    }
    for fn in benches.values():  # warm-up
        fn(100)
    for d in (cyc_warn.by_trigger, rawt.phases):
        for v in d.values():
            v.clear()
    s1 = run_rounds(benches, cfg["rounds"], cfg["batch"])
    res["transition"] = {k: v.summary() for k, v in s1.items()}
    cyc_50.close()

    # the same pair with synchronous=FULL (an fsync per commit), in rounds of its own
    log("[1b/6] raw floor vs one durable transition with synchronous=FULL")
    raw_full, raw_full_conn = raw_floor_bench(workdir / "raw_full.db", "FULL")
    cyc_full = CommitCycler(workdir / "commit_full.db", warn_logger, synchronous="FULL")
    for fn in (raw_full, cyc_full.bench):
        fn(20)
    s1f = run_rounds(
        {"raw_floor_full": raw_full, "commit_warn_full": cyc_full.bench},
        cfg["rounds"],
        cfg["batch_full"],
    )
    res["transition_full_sync"] = {k: v.summary() for k, v in s1f.items()}
    raw_full_conn.close()
    cyc_full.close()
    res["transition_by_trigger_us"] = {
        t: median([x / 1000 for x in v]) for t, v in cyc_warn.by_trigger.items()
    }
    res["raw_transition_phases_us"] = {
        k: median([x / 1000 for x in v]) for k, v in rawt.phases.items()
    }
    res["ratios"] = {
        "commit_warn / raw_floor": paired_ratio(s1["commit_warn"], s1["raw_floor"]),
        "commit_warn / raw_floor (means, incl. WAL auto-checkpoints)": (
            res["transition"]["commit_warn"]["mean_us"] / res["transition"]["raw_floor"]["mean_us"]
        ),
        "commit_json / raw_floor": paired_ratio(s1["commit_json"], s1["raw_floor"]),
        "commit_warn_50_scores / raw_floor": paired_ratio(
            s1["commit_warn_50_scores"], s1["raw_floor"]
        ),
        "synchronous=FULL: commit_warn / raw_floor": paired_ratio(
            s1f["commit_warn_full"], s1f["raw_floor_full"]
        ),
        "raw_transition_sql / raw_floor": paired_ratio(s1["raw_transition_sql"], s1["raw_floor"]),
        "commit_warn / raw_transition_sql": paired_ratio(
            s1["commit_warn"], s1["raw_transition_sql"]
        ),
    }

    # WAL frames written per operation
    res["wal_frames_per_op"] = {
        "raw_floor": wal_frames_per_op(workdir / "raw.db", lambda: raw_bench(1), 100),
        "commit_warn": wal_frames_per_op(workdir / "commit_warn.db", cyc_warn.one, 99),
        "raw_transition_sql": wal_frames_per_op(
            workdir / "raw_transition.db", lambda: rawt.bench(1), 99
        ),
    }

    # -- 2b: where the time of one transition goes ---------------------------------------------
    log("[2/6] phase timing and cProfile of _commit")
    phases: dict[str, list[int]] = {}
    while cyc_warn.i % 3:  # back to a loop in executing
        cyc_warn.one()
    eng = cyc_warn.engine
    loop = cyc_warn.loop
    real: list[int] = []
    clock = time.perf_counter_ns
    for c in range(cfg["phase_cycles"]):
        # interleave the phase-timed copy with the real _commit, cycle by cycle
        if c % 2:
            loop = phased_commit(eng, loop, "submit", DATA, phases)
            loop = phased_commit(eng, loop, "evaluate", DATA, phases)
            loop = phased_commit(
                eng, loop, "decide", DATA, phases, machine_kwargs={"decision": CONTINUE}
            )
        else:
            for trig in CommitCycler.CYCLE:
                kw = {"machine_kwargs": {"decision": CONTINUE}} if trig == "decide" else {}
                t = clock()
                loop = eng._commit(loop, trig, DATA, **kw)
                real.append(clock() - t)
    cyc_warn.loop = loop
    res["commit_phases_us"] = {k: median([x / 1000 for x in v]) for k, v in phases.items()}
    res["commit_phases_us"]["real _commit (same stretch)"] = median([x / 1000 for x in real])
    # machine.step alone, per trigger (pure CPU)
    step_us = {}
    for trig, st in (
        ("submit", State.EXECUTING),
        ("evaluate", State.VALIDATING),
        ("decide", State.DECIDING),
    ):
        kw = {"decision": CONTINUE} if trig == "decide" else {}
        samples = []
        for _ in range(21):
            t = clock()
            for _ in range(500):
                machine.step("x", st, trig, **kw)
            samples.append((clock() - t) / 500 / 1000)
        step_us[trig] = median(samples)
    res["machine_step_us"] = step_us
    res["profile"] = profile_commit(workdir / "profile.db", warn_logger, cfg["profile_commits"])

    raw_conn.close()
    cyc_json.close()
    rawt.conn.close()

    # -- 3: a full iteration through the public API ---------------------------------------------
    log("[3/6] engine.submit: no rules vs one pattern rule (interleaved with the raw floor)")
    raw_bench2, raw_conn2 = raw_floor_bench(workdir / "raw2.db")
    sub_eng = LoopEngine(str(workdir / "submit.db"), logger=warn_logger)
    sub_none = Submitter(sub_eng, LoopConfig(**BIG_CONFIG))
    sub_pat = Submitter(
        sub_eng,
        LoopConfig(**BIG_CONFIG, rules=[rules.pattern("no-todo", r"TODO", must_match=False)]),
    )
    for b in (sub_none.bench, sub_pat.bench):
        b(30)
    s3 = run_rounds(
        {
            "raw_floor": raw_bench2,
            "submit_no_rules": sub_none.bench,
            "submit_pattern_rule": sub_pat.bench,
        },
        cfg["submit_rounds"],
        cfg["submit_batch"],
    )
    res["submit"] = {k: v.summary() for k, v in s3.items()}
    res["ratios"]["submit_no_rules / raw_floor"] = paired_ratio(
        s3["submit_no_rules"], s3["raw_floor"]
    )
    res["ratios"]["submit_pattern_rule / raw_floor"] = paired_ratio(
        s3["submit_pattern_rule"], s3["raw_floor"]
    )
    res["submit_profile"] = profile_submit(
        sub_eng, LoopConfig(**BIG_CONFIG), 300 if quick else 1500
    )
    res["wal_frames_per_op"]["submit_no_rules"] = wal_frames_per_op(
        workdir / "submit.db", lambda: sub_none.bench(1), 30
    )
    sub_none.close()
    sub_pat.close()
    sub_eng.close()
    raw_conn2.close()

    # -- 4+5: build loops; bytes per iteration --------------------------------------------------
    log(f"[4/6] building a loop to {cfg['big']:,} iterations with engine.submit")
    big_db, small_db = workdir / "big.db", workdir / "small.db"
    probes: dict[int, dict[str, Any]] = {}
    build_eng = LoopEngine(str(big_db), logger=warn_logger)
    big_id_holder: list[str] = []
    probe_at = (0, 100, cfg["big"] - 100, cfg["big"])

    def probe(i: int) -> None:
        first, last = {0: (0, 0), 100: (1, 100)}.get(i, (i - 99, i))
        probes[i] = db_bytes(big_db, big_id_holder[0] if big_id_holder else "", first, last)

    t_build = time.perf_counter()
    # the loop id is needed inside probe; start it via build_loop's engine.start
    orig_start = build_eng.start

    def start_and_remember(*a: Any, **kw: Any) -> Any:
        snap = orig_start(*a, **kw)
        big_id_holder.append(snap.id)
        return snap

    build_eng.start = start_and_remember  # type: ignore[method-assign]
    big_id = build_loop(build_eng, cfg["big"], probe, probe_at)
    build_eng.start = orig_start  # type: ignore[method-assign]
    build_s = time.perf_counter() - t_build
    # re-probe the windows now that the loop is complete (iterations 1..100 and the last 100)
    res["build"] = {
        "iterations": cfg["big"],
        "seconds": build_s,
        "ms_per_iteration": build_s / cfg["big"] * 1000,
    }
    res["bytes"] = bytes_report(probes, cfg["big"])
    big10_id = build_loop(build_eng, cfg["small"])
    build_eng.close()
    with LoopEngine(str(small_db), logger=warn_logger) as e:
        small_id = build_loop(e, cfg["small"])

    log("[5/6] resume on a fresh LoopEngine, 10 vs 10,000 iterations (interleaved)")
    res["resume"] = resume_report(big_db, small_db, big_id, big10_id, small_id, cfg, warn_logger)
    log("[6/6] engine.get and warm resume")
    res["get"] = get_report(big_db, small_db, big_id, big10_id, small_id, cfg, warn_logger)

    res["environment"]["loadavg_end"] = os.getloadavg()
    res["seconds"] = time.perf_counter() - t_start
    cyc_warn.close()
    devnull.close()
    return res


def bytes_report(probes: dict[int, dict[str, Any]], big: int) -> dict[str, Any]:
    p0, p100, pb_100, pb = probes[0], probes[100], probes[big - 100], probes[big]

    def stored(p: dict[str, Any]) -> int:
        return int(
            p["checkpoint_data_bytes"]
            + p["checkpoint_other_bytes_approx"]
            + p["iteration_decision_bytes"]
            + p["iteration_other_bytes_approx"]
        )

    def pages(p: dict[str, Any]) -> int:
        return sum(t["pages_bytes"] for t in p["tables"].values())

    def payload(p: dict[str, Any]) -> int:
        return sum(t["payload_bytes"] for t in p["tables"].values())

    out = {
        # the loop's own rows, per iteration, in a window of 100 iterations
        "rows_bytes_per_iter_first_100": stored(p100) / 100,
        "rows_bytes_per_iter_last_100": stored(pb) / 100,
        # dbstat: record payload bytes (all tables and indexes) per iteration
        "dbstat_payload_per_iter_at_100": (payload(p100) - payload(p0)) / 100,
        "dbstat_payload_per_iter_at_big": (payload(pb) - payload(p0)) / big,
        "dbstat_payload_per_iter_last_100": (payload(pb) - payload(pb_100)) / 100,
        # file size after a WAL checkpoint (page-granular)
        "file_bytes_per_iter_at_100": (p100["file_bytes"] - p0["file_bytes"]) / 100,
        "file_bytes_per_iter_at_big": (pb["file_bytes"] - p0["file_bytes"]) / big,
        "file_bytes_per_iter_last_100": (pb["file_bytes"] - pb_100["file_bytes"]) / 100,
        "pages_bytes_per_iter_at_100": (pages(p100) - pages(p0)) / 100,
        "pages_bytes_per_iter_at_big": (pages(pb) - pages(p0)) / big,
        "checkpoint_data_bytes_per_iter_first_100": p100["checkpoint_data_bytes"] / 100,
        "checkpoint_data_bytes_per_iter_last_100": pb["checkpoint_data_bytes"] / 100,
        "tables_at_big": pb["tables"],
        "file_bytes_at_big": pb["file_bytes"],
    }
    out["ratios"] = {
        "rows (last 100 / first 100)": out["rows_bytes_per_iter_last_100"]
        / out["rows_bytes_per_iter_first_100"],
        "dbstat payload (avg at big / avg at 100)": out["dbstat_payload_per_iter_at_big"]
        / out["dbstat_payload_per_iter_at_100"],
        "file size (avg at big / avg at 100)": out["file_bytes_per_iter_at_big"]
        / out["file_bytes_per_iter_at_100"],
        "file size (last 100 / first 100)": out["file_bytes_per_iter_last_100"]
        / out["file_bytes_per_iter_at_100"],
    }
    return out


def resume_report(
    big_db: Path,
    small_db: Path,
    big_id: str,
    big10_id: str,
    small_id: str,
    cfg: dict[str, Any],
    logger: Any,
) -> dict[str, Any]:
    killers = {
        (db, kind): cls(str(db), logger=logger)
        for db in (big_db, small_db)
        for kind, cls in (("deciding", _KillBeforeDecide), ("validating", _KillBeforeValidate))
    }
    build = LoopEngine(str(small_db), logger=logger)

    def fresh_small_loop() -> str:
        return build_loop(build, cfg["small"])

    # case: (label, db, loop id or factory, state to leave it in)
    cases: list[tuple[str, Path, Callable[[], str], str]] = [
        ("executing@10 (own small db)", small_db, lambda: small_id, "executing"),
        ("executing@10 (in the 10k db)", big_db, lambda: big10_id, "executing"),
        ("executing@10000", big_db, lambda: big_id, "executing"),
        ("deciding@10 (own small db)", small_db, fresh_small_loop, "deciding"),
        ("deciding@10000", big_db, lambda: big_id, "deciding"),
        ("validating@10 (own small db)", small_db, fresh_small_loop, "validating"),
        ("validating@10000", big_db, lambda: big_id, "validating"),
    ]
    series = {c[0]: Series(c[0]) for c in cases}
    opens = Series("open")
    for rep in range(cfg["resume_reps"] + 1):  # rep 0 is warm-up
        k = rep % len(cases)
        for label, db, get_id, state in cases[k:] + cases[:k]:
            loop_id = get_id()
            if state != "executing":
                leave_in(killers[(db, state)], loop_id)
            gc.collect()
            t0 = time.perf_counter_ns()
            fresh = LoopEngine(str(db), logger=logger)
            t1 = time.perf_counter_ns()
            before = fresh.get(loop_id) if rep == 0 else None
            t2 = time.perf_counter_ns()
            snap = fresh.resume(loop_id)
            t3 = time.perf_counter_ns()
            fresh.close()
            if before is not None:
                assert before.state.value == state, (label, before.state)
            assert snap.state is State.EXECUTING, (label, snap.state)
            if rep:
                series[label].add([t3 - t2])
                opens.add([t1 - t0])
    for e in (*killers.values(), build):
        e.close()
    out: dict[str, Any] = {k: v.summary() for k, v in series.items()}
    out["open LoopEngine()"] = opens.summary()
    m = {k: v.summary()["median_us"] for k, v in series.items()}
    out["ratios"] = {
        "executing: 10000 / 10 (own db)": m["executing@10000"] / m["executing@10 (own small db)"],
        "executing: 10000 / 10 (same db)": m["executing@10000"] / m["executing@10 (in the 10k db)"],
        "deciding: 10000 / 10": m["deciding@10000"] / m["deciding@10 (own small db)"],
        "validating: 10000 / 10": m["validating@10000"] / m["validating@10 (own small db)"],
    }
    return out


def get_report(
    big_db: Path,
    small_db: Path,
    big_id: str,
    big10_id: str,
    small_id: str,
    cfg: dict[str, Any],
    logger: Any,
) -> dict[str, Any]:
    e_big = LoopEngine(str(big_db), logger=logger)
    e_small = LoopEngine(str(small_db), logger=logger)
    benches: dict[str, Callable[[int], list[int]]] = {}
    for label, eng, loop_id in (
        ("get@10 (own small db)", e_small, small_id),
        ("get@10000", e_big, big_id),
        ("warm resume executing@10 (own small db)", e_small, small_id),
        ("warm resume executing@10000", e_big, big_id),
    ):
        method = eng.resume if "resume" in label else eng.get

        def bench(
            n: int, method: Callable[[str], Any] = method, loop_id: str = loop_id
        ) -> list[int]:
            out = []
            clock = time.perf_counter_ns
            for _ in range(n):
                t = clock()
                method(loop_id)
                out.append(clock() - t)
            return out

        bench(20)
        benches[label] = bench
    s = run_rounds(benches, 10, max(1, cfg["get_reps"] // 10))
    e_big.close()
    e_small.close()
    out: dict[str, Any] = {k: v.summary() for k, v in s.items()}
    out["ratios"] = {
        "get: 10000 / 10": paired_ratio(s["get@10000"], s["get@10 (own small db)"]),
        "warm resume: 10000 / 10": paired_ratio(
            s["warm resume executing@10000"], s["warm resume executing@10 (own small db)"]
        ),
    }
    return out


# ----- report ----------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _row(name: str, s: dict[str, Any], ratio: float | None = None, note: str = "") -> str:
    r = f"{ratio:6.2f}x" if ratio is not None else "       "
    return (
        f"  {name:<44} {s['median_us']:9.1f} {s['p10_us']:9.1f} {s['p90_us']:9.1f} "
        f"{s['mean_us']:9.1f} {r}  {note}"
    )


def verdict(value: float, target: float) -> str:
    return f"target <= {target:g}x: {'met' if value <= target else 'MISSED'}"


def render(res: dict[str, Any]) -> str:
    env = res["environment"]
    fs = env["filesystem"]
    lines = [
        f"loopwarden core benchmark ({res['mode']} mode, {res['seconds']:.0f} s)",
        f"  machine: {env['nproc']} CPUs ({env['cpu']}), Linux {env['kernel']}, "
        f"load {env['loadavg_start'][0]:.2f} -> {env['loadavg_end'][0]:.2f}",
        f"  python {env['python']}, sqlite {env['sqlite']}, sqlalchemy {env['sqlalchemy']}, "
        f"transitions {env['transitions']}, structlog {env['structlog']}, "
        f"loopwarden {env['loopwarden']} ({env['git']})",
        f"  databases in {env['workdir']} ({fs['fstype']} on {fs['device']}, mount "
        f"{fs['mount']}); WAL, synchronous=NORMAL everywhere",
        "",
        f"  {'per operation (µs)':<44} {'median':>9} {'p10':>9} {'p90':>9} {'mean':>9}"
        f" {'ratio':>7}",
    ]
    t, ra = res["transition"], res["ratios"]
    lines += [
        _row("raw floor: sqlite3 INSERT 500 B + COMMIT", t["raw_floor"], 1.0),
        _row(
            "durable transition: _commit (log WARNING)",
            t["commit_warn"],
            ra["commit_warn / raw_floor"],
            verdict(ra["commit_warn / raw_floor"], 2),
        ),
        _row(
            "durable transition: _commit (INFO JSON)",
            t["commit_json"],
            ra["commit_json / raw_floor"],
        ),
        _row(
            "  _commit, loop row holding 50 scores",
            t["commit_warn_50_scores"],
            ra["commit_warn_50_scores / raw_floor"],
        ),
        _row(
            "  its SQL alone via sqlite3",
            t["raw_transition_sql"],
            ra["raw_transition_sql / raw_floor"],
        ),
        _row(
            "  alt SQL: BEGIN+INSERT cp+COMMIT (no UPDATE)",
            t["alt_insert_only_sql"],
            median_ratio(t["alt_insert_only_sql"], t["raw_floor"]),
        ),
        _row(
            "  alt SQL: fenced INSERT..SELECT, autocommit",
            t["alt_fenced_insert_select_sql"],
            median_ratio(t["alt_fenced_insert_select_sql"], t["raw_floor"]),
        ),
    ]
    tf = res["transition_full_sync"]
    lines += [
        _row("raw floor, synchronous=FULL", tf["raw_floor_full"], 1.0),
        _row(
            "_commit, synchronous=FULL",
            tf["commit_warn_full"],
            ra["synchronous=FULL: commit_warn / raw_floor"],
        ),
    ]
    sub = res["submit"]
    lines += [
        _row("raw floor (same rounds as submit)", sub["raw_floor"], 1.0),
        _row(
            "engine.submit, no rules (3 transitions)",
            sub["submit_no_rules"],
            res["ratios"]["submit_no_rules / raw_floor"],
        ),
        _row(
            "engine.submit, one pattern rule",
            sub["submit_pattern_rule"],
            res["ratios"]["submit_pattern_rule / raw_floor"],
        ),
    ]
    rs = res["resume"]
    lines.append("  resume on a fresh LoopEngine (lease acquire+release included):")
    for k in rs:
        if k != "ratios":
            lines.append(_row("  " + k, rs[k]))
    g = res["get"]
    lines.append("  warm engine:")
    for k in g:
        if k != "ratios":
            lines.append(_row("  " + k, g[k]))
    lines += ["", "  ratios (paired within rounds where interleaved):"]
    for k, v in res["ratios"].items():
        lines.append(f"    {k:<52} {v:6.2f}x")
    for k, v in rs["ratios"].items():
        note = verdict(v, 1.2) if k.startswith("executing") else ""
        lines.append(f"    resume {k:<45} {v:6.2f}x  {note}")
    for k, v in g["ratios"].items():
        lines.append(f"    {k:<52} {v:6.2f}x")
    b = res["bytes"]
    lines += [
        "",
        f"  bytes per iteration (loop built to {res['build']['iterations']:,} iterations in "
        f"{res['build']['seconds']:.1f} s, {res['build']['ms_per_iteration']:.2f} ms/iteration)",
        f"    loop rows (checkpoints + iteration row): first 100 "
        f"{b['rows_bytes_per_iter_first_100']:.0f} B, last 100 "
        f"{b['rows_bytes_per_iter_last_100']:.0f} B",
        f"    of which checkpoint data JSON: {b['checkpoint_data_bytes_per_iter_first_100']:.0f}"
        f" B -> {b['checkpoint_data_bytes_per_iter_last_100']:.0f} B",
        f"    dbstat record payload, all tables+indexes: avg at 100 "
        f"{b['dbstat_payload_per_iter_at_100']:.0f} B, avg at 10k "
        f"{b['dbstat_payload_per_iter_at_big']:.0f} B, last 100 "
        f"{b['dbstat_payload_per_iter_last_100']:.0f} B",
        f"    file size after WAL checkpoint: avg at 100 {b['file_bytes_per_iter_at_100']:.0f} B,"
        f" avg at 10k {b['file_bytes_per_iter_at_big']:.0f} B, last 100 "
        f"{b['file_bytes_per_iter_last_100']:.0f} B",
    ]
    for k, v in b["ratios"].items():
        lines.append(f"    {k:<52} {v:6.2f}x  {verdict(v, 1.1)}")
    w = res["wal_frames_per_op"]
    lines += [
        "",
        "  WAL frames (4 KiB pages) written per operation: "
        + ", ".join(f"{k} {v:.2f}" for k, v in w.items()),
    ]
    lines += [
        "",
        "  one durable transition, by trigger (median µs): "
        + ", ".join(f"{k} {v:.1f}" for k, v in res["transition_by_trigger_us"].items()),
    ]
    lines.append(
        "  its SQL via sqlite3, by statement (median µs): "
        + ", ".join(f"{k} {v:.1f}" for k, v in res["raw_transition_phases_us"].items())
    )
    lines.append(
        "  machine.step alone (median µs): "
        + ", ".join(f"{k} {v:.1f}" for k, v in res["machine_step_us"].items())
    )
    lines += ["", "  phase-timed copy of _commit (median µs per phase, no profiler):"]
    for k, v in res["commit_phases_us"].items():
        lines.append(f"    {k:<44} {v:8.1f}")
    p = res["profile"]
    lines += [
        "",
        f"  cProfile of {p['calls']} _commit calls "
        f"({p['total_us_per_commit']:.1f} µs/commit under the profiler; the profiler "
        "inflates Python-level calls):",
    ]
    for k, v in p["categories"].items():
        lines.append(f"    {k:<44} {v['us_per_commit']:8.1f} µs  {v['share'] * 100:5.1f}%")
    lines.append("  top functions by self time (per commit):")
    for f in p["top_functions"][:12]:
        lines.append(
            f"    {f['function'][:60]:<60} {f['calls_per_commit']:5.1f} calls "
            f"{f['self_us_per_commit']:7.1f} µs"
        )
    lines += [
        "",
        "  engine.submit (no rules, past iteration 50) under cProfile, cumulative per submit:",
    ]
    for k, v in res["submit_profile"].items():
        lines.append(
            f"    {k[:52]:<52} {v['calls_per_submit']:5.1f} calls {v['cum_us_per_submit']:8.1f} µs"
        )
    return "\n".join(lines)


def median_ratio(a: dict[str, Any], b: dict[str, Any]) -> float:
    return float(a["median_us"] / b["median_us"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (< 60 s)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--dir", metavar="DIR", help="where the databases go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the databases afterwards")
    args = ap.parse_args(argv)
    parent = Path(args.dir).resolve() if args.dir else None
    if parent:
        parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="loopwarden-bench-", dir=parent))
    try:
        res = run(args.quick, workdir)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(render(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2, default=str) + "\n")
        log(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
