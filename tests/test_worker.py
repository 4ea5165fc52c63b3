"""Workers: claiming runnable loops, driving them under lease and epoch fencing, and failures.

The in-process tests run on both backends; the multi-process ones (SIGSTOP, SIGKILL,
SIGTERM, four workers on 200 loops) on PostgreSQL, the backend workers are meant for.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from loopwarden import LoopConfig, LoopEngine, State, rules
from loopwarden.runner import AGENT_RULE, RunSettings
from loopwarden.worker import enqueue, run_worker

pytest_plugins = ["postgres_fixture"]

PROC = Path(__file__).parent / "_worker_proc.py"
TWO_ITERATIONS = [
    "initialized",
    "executing",
    "validating",
    "deciding",
    "executing",
    "validating",
    "deciding",
    "completed",
]


def agent(marks: Path | None = None, sleep: float = 0.0) -> str:
    """A shell agent: 'working' on iteration 1, a COMPLETE promise from iteration 2 on.

    With ``marks`` it first touches ``marks/<loop>.<iteration>.<pid>`` (so a test sees when an
    agent run started); with ``sleep`` it then takes that long.
    """
    parts = []
    if marks is not None:
        parts.append(f'touch "{marks}/$LOOPWARDEN_LOOP_ID.$LOOPWARDEN_ITERATION.$$"')
    if sleep:
        parts.append(f"sleep {sleep}")
    parts.append(
        'if [ "$LOOPWARDEN_ITERATION" -ge 2 ]; then echo "<promise>COMPLETE</promise>"; '
        "else echo working; fi"
    )
    return "; ".join(parts)


def queue(url: str, n: int, command: str, **kwargs: object) -> list[str]:
    engine = LoopEngine(url)
    try:
        return [
            enqueue(
                engine,
                "T",
                LoopConfig(max_iterations=4),
                prompt="p",
                agent=command,
                shell=True,
                **kwargs,  # type: ignore[arg-type]
            ).id
            for _ in range(n)
        ]
    finally:
        engine.close()


def states(engine: LoopEngine, loop_id: str) -> list[str]:
    return [c.state.value for c in engine.checkpoints(loop_id)]


def rows(url: str, statement: str, **params: object) -> list[tuple[object, ...]]:
    eng = create_engine(url)
    try:
        with eng.begin() as conn:
            return [tuple(r) for r in conn.execute(text(statement), params)]
    finally:
        eng.dispose()


def assert_each_transition_once(url: str, loop_ids: list[str]) -> None:
    """From the rows: every loop completed with exactly one checkpoint per state entry."""
    engine = LoopEngine(url)
    try:
        for loop_id in loop_ids:
            cps = engine.checkpoints(loop_id)
            assert [c.state.value for c in cps] == TWO_ITERATIONS, loop_id
            assert [c.seq for c in cps] == list(range(1, 9)), loop_id
            assert [r.iteration for r in engine.history(loop_id)] == [1, 2], loop_id
    finally:
        engine.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'worker.db'}"
    url: str = request.getfixturevalue("fresh_pg_url")
    return url


class TestEnqueue:
    """``enqueue`` queues a loop for the workers."""

    def test_a_queued_loop_waits_initialized_with_its_agent(self, store_url: str) -> None:
        """The loop is created, not started; the agent command and the agent rule are stored."""
        engine = LoopEngine(store_url)
        try:
            loop = enqueue(engine, "T", prompt="p", agent="my-agent --fast", workdir="/tmp")
            got = engine.get(loop.id)
            assert got.state is State.INITIALIZED
            settings = RunSettings.of(got)
            assert settings is not None
            assert (settings.agent, settings.workdir) == ("my-agent --fast", "/tmp")
            assert [r.name for r in got.config.rules] == [AGENT_RULE]
            assert got.config.workdir == "/tmp"
        finally:
            engine.close()

    def test_its_own_agent_rule_is_kept(self, store_url: str) -> None:
        """A config that already has an 'agent' rule is not given a second one."""
        engine = LoopEngine(store_url)
        try:
            mine = rules.pattern(AGENT_RULE, "x")
            config = LoopConfig(rules=[mine])
            loop = enqueue(engine, "T", config, prompt="p", agent="a")
            assert [r.name for r in engine.get(loop.id).config.rules] == [AGENT_RULE]
        finally:
            engine.close()


class TestWorkerInProcess:
    """What a worker claims and how it drives it, on both backends."""

    def test_queued_loops_are_driven_to_completion(self, store_url: str) -> None:
        """Every queued loop completes, each transition exactly once."""
        ids = queue(store_url, 6, agent())
        report = run_worker(store_url, concurrency=2, exit_when_idle=True, handle_signals=False)
        assert report.loops_finished == 6
        assert sorted(report.finished) == sorted(ids)
        assert (report.errors, report.leases_lost) == (0, 0)
        assert_each_transition_once(store_url, ids)
        assert rows(store_url, "SELECT count(*) FROM lw_loops WHERE lease_owner IS NOT NULL") == [
            (0,)
        ]

    def test_loops_driven_by_their_own_driver_are_left_alone(self, store_url: str) -> None:
        """An executing loop without a stored agent command is not the workers' to drive."""
        engine = LoopEngine(store_url)
        try:
            loop = engine.start("T", LoopConfig())
            report = run_worker(store_url, exit_when_idle=True, handle_signals=False)
            assert report.loops_claimed == 0
            assert states(engine, loop.id) == ["initialized", "executing"]
        finally:
            engine.close()

    def test_a_crashed_iteration_is_finished_without_an_agent(self, store_url: str) -> None:
        """A loop left validating (its driver died) is finished by a worker from what is stored."""
        from _driver import leave_in

        engine = LoopEngine(store_url)
        try:
            loop = engine.start("T", LoopConfig(rules=[]))
            leave_in(store_url, loop.id, "validating", "<promise>COMPLETE</promise>")
            report = run_worker(store_url, exit_when_idle=True, handle_signals=False)
            assert report.loops_finished == 1
            assert engine.get(loop.id).state is State.COMPLETED
        finally:
            engine.close()

    def test_a_live_lease_is_not_claimed(self, store_url: str) -> None:
        """A loop someone holds is skipped until its lease is released."""
        (loop_id,) = queue(store_url, 1, agent())
        holder = LoopEngine(store_url, owner="someone")
        try:
            with holder.hold(loop_id):
                report = run_worker(store_url, exit_when_idle=True, handle_signals=False)
                assert report.loops_claimed == 0
            report = run_worker(store_url, exit_when_idle=True, handle_signals=False)
            assert report.loops_finished == 1
        finally:
            holder.close()

    def test_stop_finishes_the_step_and_releases(self, store_url: str, tmp_path: Path) -> None:
        """Setting stop mid-agent: that iteration is submitted, then the lease is released."""
        marks = tmp_path / "marks"
        marks.mkdir()
        (loop_id,) = queue(store_url, 1, agent(marks, sleep=0.5))
        stop = threading.Event()

        def stop_when_the_agent_runs() -> None:
            while not list(marks.iterdir()):
                time.sleep(0.01)
            stop.set()

        threading.Thread(target=stop_when_the_agent_runs, daemon=True).start()
        report = run_worker(store_url, stop=stop, handle_signals=False, poll_interval=0.05)
        assert report.loops_finished == 0
        engine = LoopEngine(store_url)
        try:
            assert states(engine, loop_id) == TWO_ITERATIONS[:5]
        finally:
            engine.close()
        assert rows(store_url, "SELECT lease_owner FROM lw_loops") == [(None,)]

    def test_completion_hooks_fire_when_a_worker_finishes_a_loop(
        self, store_url: str, tmp_path: Path
    ) -> None:
        """The loop's stored completion hook gets the payload, as with ``loopwarden run``."""
        out = tmp_path / "payload.json"
        hook = tmp_path / "hook.sh"
        hook.write_text(f'#!/bin/sh\ncat > "{out}"\n')
        hook.chmod(0o755)
        (loop_id,) = queue(store_url, 1, agent(), on_complete=[str(hook)])
        run_worker(store_url, exit_when_idle=True, handle_signals=False)
        payload = json.loads(out.read_text())
        assert (payload["loop_id"], payload["status"], payload["iterations"]) == (
            loop_id,
            "completed",
            2,
        )


# ----- several processes, on PostgreSQL ------------------------------------------------------


class Worker:
    """A worker subprocess (tests/_worker_proc.py) and its log."""

    def __init__(self, url: str, log: Path, **options: object) -> None:
        args = [sys.executable, str(PROC), url, "--log", str(log)]
        for name, value in options.items():
            flag = "--" + name.replace("_", "-")
            args += [flag] if value is True else [flag, str(value)]
        self.log = log
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def report(self, timeout: float = 60.0) -> dict[str, object]:
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err.decode(errors="replace")[-3000:]
        report: dict[str, object] = json.loads(out)
        return report

    def events(self) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Worker processes started by a test; killed if the test leaves any running."""
    started: list[Worker] = []
    yield started
    for w in started:
        w.kill()


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def owners_of(url: str, loop_id: str) -> list[tuple[str, float]]:
    """Who wrote each checkpoint of a loop, and when."""
    found = rows(
        url,
        "SELECT owner, created_at FROM lw_checkpoints WHERE loop_id=:id ORDER BY seq",
        id=loop_id,
    )
    return [(str(o), float(t)) for o, t in found]  # type: ignore[arg-type]


class TestFencing:
    """A worker frozen past its lease loses the loop, and every write it tries is rejected."""

    def test_sigstop_past_the_lease_then_sigcont(
        self, fresh_pg_url: str, tmp_path: Path, workers: list[Worker]
    ) -> None:
        """B takes over and finishes; A, resumed, has its submit rejected and writes nothing."""
        url, marks = fresh_pg_url, tmp_path / "marks"
        marks.mkdir()
        (loop_id,) = queue(url, 1, agent(marks, sleep=0.6))
        a = Worker(url, tmp_path / "a.log", lease_ttl=1.0, exit_when_idle=True)
        workers.append(a)
        wait_for(lambda: any(marks.iterdir()), 30, "A's agent to start")
        os.kill(a.proc.pid, signal.SIGSTOP)
        paused = time.time()
        try:
            time.sleep(1.5)  # A's lease (1 s, renewed every 1/3 s) lapses
            b = Worker(url, tmp_path / "b.log", lease_ttl=1.0, exit_when_idle=True)
            workers.append(b)
            b_report = b.report()
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        a_report = a.report()
        assert b_report["loops_finished"] == 1
        assert (a_report["leases_lost"], a_report["loops_finished"]) == (1, 0)
        assert_each_transition_once(url, [loop_id])
        late = {owner for owner, at in owners_of(url, loop_id) if at > paused}
        assert late
        assert all(":".join(o.split(":")[:3]) != a_report["owner"] for o in late)
        lost = [e for e in a.events() if e.get("event") == "lease_lost"]
        assert len(lost) == 1
        assert "rejected" in str(lost[0]["error"])


class TestCrashes:
    """SIGKILL and SIGTERM."""

    def test_a_killed_workers_loops_are_taken_over_after_the_lease(
        self, fresh_pg_url: str, tmp_path: Path, workers: list[Worker]
    ) -> None:
        """After SIGKILL, another worker finishes every loop; no step is applied twice."""
        url, marks = fresh_pg_url, tmp_path / "marks"
        marks.mkdir()
        ids = queue(url, 6, agent(marks, sleep=0.2))
        a = Worker(url, tmp_path / "a.log", lease_ttl=1.0, concurrency=3)
        workers.append(a)
        wait_for(lambda: len(list(marks.iterdir())) >= 4, 30, "A to get going")
        a.kill()
        held = rows(url, "SELECT id, lease_expires FROM lw_loops WHERE lease_owner IS NOT NULL")
        assert held, "A held no lease when it was killed"
        b = Worker(url, tmp_path / "b.log", lease_ttl=1.0, concurrency=3, exit_when_idle=True)
        workers.append(b)
        b_report = b.report()
        assert b_report["leases_lost"] == 0
        assert_each_transition_once(url, ids)
        claimed = {
            str(e["loop_id"]): float(e["at"])  # type: ignore[arg-type]
            for e in b.events()
            if e.get("event") == "loop_claimed"
        }
        for loop_id, expires in held:
            assert claimed[str(loop_id)] >= float(expires), "taken over before the lease expired"  # type: ignore[arg-type]

    def test_sigterm_finishes_the_step_and_releases_the_lease(
        self, fresh_pg_url: str, tmp_path: Path, workers: list[Worker]
    ) -> None:
        """SIGTERM during the agent: the iteration is submitted, the lease released, exit 0."""
        url, marks = fresh_pg_url, tmp_path / "marks"
        marks.mkdir()
        (loop_id,) = queue(url, 1, agent(marks, sleep=0.5))
        a = Worker(url, tmp_path / "a.log", lease_ttl=30.0)
        workers.append(a)
        wait_for(lambda: any(marks.iterdir()), 30, "the agent to start")
        a.proc.send_signal(signal.SIGTERM)
        report = a.report()
        assert report["loops_finished"] == 0
        engine = LoopEngine(url)
        try:
            assert states(engine, loop_id) == TWO_ITERATIONS[:5]
        finally:
            engine.close()
        assert rows(url, "SELECT lease_owner, lease_expires FROM lw_loops") == [(None, 0.0)]
        stopping = [e for e in a.events() if e.get("event") == "worker_stopping"]
        assert len(stopping) == 1


class TestDatabaseRestart:
    """A PostgreSQL restart under running workers."""

    def test_workers_reconnect_and_finish_every_loop(self, fresh_pg_url: str) -> None:
        """The connections die mid-step; the worker reconnects and every loop still completes."""
        import postgres_fixture

        server, _why = postgres_fixture.server()
        if server is None or server.data is None or server.bindir is None:
            pytest.skip("needs a cluster started by the tests (not LOOPWARDEN_TEST_PG_URL)")
        ids = queue(fresh_pg_url, 6, agent(sleep=0.3))
        stop = threading.Event()
        result: dict[str, object] = {}

        def work() -> None:
            result["report"] = run_worker(
                fresh_pg_url,
                concurrency=2,
                lease_ttl=2.0,
                poll_interval=0.2,
                stop=stop,
                handle_signals=False,
            )

        thread = threading.Thread(target=work)
        thread.start()
        try:
            time.sleep(0.8)
            server.restart()
            engine = LoopEngine(fresh_pg_url)
            try:
                wait_for(
                    lambda: all(engine.get(i).state is State.COMPLETED for i in ids),
                    30,
                    "every loop to complete",
                )
            finally:
                engine.close()
        finally:
            stop.set()
            thread.join()
        assert_each_transition_once(fresh_pg_url, ids)


class TestManyWorkers:
    """Four worker processes on 200 loops."""

    def test_every_loop_finishes_each_transition_once_one_driver_at_a_time(
        self, fresh_pg_url: str, tmp_path: Path, workers: list[Worker]
    ) -> None:
        """All 200 complete; checkpoints show each transition once; no overlapping drivers."""
        url = fresh_pg_url
        ids = queue(url, 200, agent())
        for n in range(4):
            w = Worker(url, tmp_path / f"w{n}.log", concurrency=2, exit_when_idle=True)
            workers.append(w)
        reports = [w.report(timeout=120) for w in workers]
        assert sum(int(r["loops_finished"]) for r in reports) == 200  # type: ignore[call-overload]
        assert sum(int(r["leases_lost"]) for r in reports) == 0  # type: ignore[call-overload]
        assert_each_transition_once(url, ids)
        counts = rows(
            url,
            "SELECT loop_id, count(*) FROM lw_iterations GROUP BY loop_id HAVING count(*) <> 2",
        )
        assert counts == []
        spans: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
        for w in workers:
            opened: dict[tuple[str, str], float] = {}
            for e in w.events():
                key = (str(e.get("loop_id")), str(e.get("worker")))
                if e.get("event") == "loop_claimed":
                    opened[key] = float(e["at"])  # type: ignore[arg-type]
                elif e.get("event") == "loop_released":
                    spans[key[0]].append((opened.pop(key), float(e["at"]), key[1]))  # type: ignore[arg-type]
        assert set(spans) == set(ids)
        for loop_id, held in spans.items():
            held.sort()
            for (_s1, end1, w1), (start2, _e2, w2) in itertools.pairwise(held):
                assert end1 <= start2, f"{loop_id} driven by {w1} and {w2} at once"
        busy = [r for r in reports if int(r["loops_finished"]) > 0]  # type: ignore[call-overload]
        assert len(busy) >= 2, "the work was not shared between processes"
