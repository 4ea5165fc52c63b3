"""Crash safety: a loop killed with SIGKILL at any instant resumes to the uninterrupted record.

A forked child drives a scripted loop (``_driver``) and is killed after a random delay drawn
over the run's measured duration, so kills land inside transactions, between them, and while a
lease is held. After each kill the stored rows must be a prefix of an uninterrupted run's rows;
the next child resumes (taking over the dead child's lease at once), and at the end the parent
finishes the loop with a new engine and compares the whole record.

Reproduce a failure with ``LOOPWARDEN_CRASH_SEED=<seed>`` (the seed is in the failure message);
run the long variant with ``LOOPWARDEN_SLOW=1``.
"""

from __future__ import annotations

import gc
import os
import random
import signal
import statistics
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import _driver
from loopwarden import LoopEngine

# Kills per scenario: 5 scenarios x 40 = 200 in the default suite.
DEFAULT_KILLS = 40
SLOW_KILLS = 400
MAX_ROUNDS = 8  # kill/resume rounds per loop before the parent finishes it
NO_WAIT_SHARE = 0.15  # kills that do not wait for the child's engine: land during start-up


def _seed() -> int:
    env = os.environ.get("LOOPWARDEN_CRASH_SEED")
    return int(env) if env else random.SystemRandom().randrange(2**32)


@dataclass
class _Child:
    pid: int
    ready: int  # read end of a pipe the child writes one byte to once its engine is open
    errors: Path


def _spawn(url: str, loop_id: str, scenario: _driver.Scenario, errors: Path) -> _Child:
    """Fork a child that opens its own engine and drives the loop to the end."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            os.close(read_end)
            engine = LoopEngine(url)
            os.write(write_end, b"r")
            _driver.drive(engine, loop_id, scenario)
            engine.close()
        except BaseException:
            errors.write_text(traceback.format_exc())
            code = 3
        finally:
            os._exit(code)
    os.close(write_end)
    return _Child(pid, read_end, errors)


def _reap(child: _Child) -> int:
    os.close(child.ready)
    _, status = os.waitpid(child.pid, 0)
    return status


def _child_failure(child: _Child, status: int) -> str:
    text = child.errors.read_text() if child.errors.exists() else "(no traceback written)"
    return f"child {child.pid} ended with wait status {status}:\n{text}"


@dataclass
class _Reference:
    run_time: float  # seconds from the child's engine being open to its exit
    record: dict[str, Any]
    checkpoints: list[tuple[Any, ...]]
    iterations: list[tuple[Any, ...]]


def _reference(tmp_path: Path, scenario: _driver.Scenario) -> _Reference:
    """Uninterrupted runs in forked children: the expected record and how long a run takes."""
    path = tmp_path / "reference.db"
    url = f"sqlite:///{path}"
    LoopEngine(url).close()
    times = []
    for n in range(3):
        loop_id = f"reference-{n}"
        child = _spawn(url, loop_id, scenario, tmp_path / f"reference-{n}.err")
        assert os.read(child.ready, 1) == b"r", _child_failure(child, -1)
        started = time.perf_counter()
        status = _reap(child)
        times.append(time.perf_counter() - started)
        assert os.WIFEXITED(status), _child_failure(child, status)
        assert os.WEXITSTATUS(status) == 0, _child_failure(child, status)
    with LoopEngine(url) as engine:
        records = [_driver.final_record(engine, f"reference-{n}") for n in range(3)]
    assert records[0] == records[1] == records[2], "the script itself is not deterministic"
    checkpoints, iterations = _driver.stored_rows(str(path), "reference-0")
    return _Reference(statistics.median(times), records[0], checkpoints, iterations)


def _crash_and_resume(tmp_path: Path, name: str, kills_wanted: int) -> None:
    seed = _seed()
    print(f"crash test {name}: LOOPWARDEN_CRASH_SEED={seed}")
    rng = random.Random(f"{seed}:{name}")
    scenario = _driver.SCENARIOS[name]
    gc.collect()  # no stray connection objects for a child to finalise (engines are closed)
    ref = _reference(tmp_path, scenario)
    path = tmp_path / "crash.db"
    url = f"sqlite:///{path}"
    LoopEngine(url).close()

    kills = loops = 0
    started = time.monotonic()
    while kills < kills_wanted:
        assert loops < kills_wanted * 3, (
            f"seed {seed}: only {kills} kills landed in {loops} loops (run time "
            f"{ref.run_time * 1000:.1f} ms)"
        )
        loop_id = f"{name}-{loops}"
        loops += 1
        for round_no in range(MAX_ROUNDS):
            child = _spawn(url, loop_id, scenario, tmp_path / f"{loop_id}-{round_no}.err")
            wait = rng.random() >= NO_WAIT_SHARE
            delay = rng.uniform(0, ref.run_time)
            if wait:
                os.read(child.ready, 1)  # b"" when the child died first; its status says why
            time.sleep(delay)
            os.kill(child.pid, signal.SIGKILL)  # a zombie accepts the signal and ignores it
            status = _reap(child)
            where = (
                f"LOOPWARDEN_CRASH_SEED={seed} scenario {name}, loop {loop_id}, round "
                f"{round_no}, kill after {delay * 1000:.2f} ms"
                + (" of the run" if wait else " from fork")
            )
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
                break  # the child finished before the kill
            assert os.WIFSIGNALED(status), f"{where}: {_child_failure(child, status)}"
            assert os.WTERMSIG(status) == signal.SIGKILL, where
            kills += 1
            checkpoints, iterations = _driver.stored_rows(str(path), loop_id)
            assert checkpoints == ref.checkpoints[: len(checkpoints)], (
                f"{where}: the stored checkpoints are not a prefix of the uninterrupted run's"
            )
            assert iterations == ref.iterations[: len(iterations)], (
                f"{where}: the stored iterations are not a prefix of the uninterrupted run's"
            )
            decided = sum(1 for c in checkpoints if c[3] == "decide")
            assert len(iterations) == decided, f"{where}: a decision without its iteration row"

        with LoopEngine(url) as engine:  # a new owner; the dead child's lease is taken at once
            _driver.drive(engine, loop_id, scenario)
            record = _driver.final_record(engine, loop_id)
        assert record == ref.record, f"LOOPWARDEN_CRASH_SEED={seed} scenario {name} {loop_id}"
        checkpoints, iterations = _driver.stored_rows(str(path), loop_id)
        assert (checkpoints, iterations) == (ref.checkpoints, ref.iterations), loop_id
    print(
        f"{name}: {kills} kills over {loops} loops in {time.monotonic() - started:.1f}s "
        f"(a run takes {ref.run_time * 1000:.1f} ms)"
    )


class TestKilledAtAnyInstant:
    """SIGKILL at random points: every resume reaches the uninterrupted run's final record."""

    @pytest.mark.parametrize("name", sorted(_driver.SCENARIOS))
    def test_resume_reaches_the_uninterrupted_record(self, tmp_path: Path, name: str) -> None:
        """Same end, checkpoints, iterations and decisions; none lost, none doubled."""
        _crash_and_resume(tmp_path, name, DEFAULT_KILLS)

    @pytest.mark.slow
    @pytest.mark.parametrize("name", sorted(_driver.SCENARIOS))
    def test_many_more_kills(self, tmp_path: Path, name: str) -> None:
        """Ten times the kills of the default run."""
        _crash_and_resume(tmp_path, name, SLOW_KILLS)


class TestScript:
    """The crash test's script is itself what it claims to be."""

    @pytest.mark.parametrize(
        ("name", "state", "reason", "iterations"),
        [
            ("blocked", "blocked", "blocked_by_agent", 11),
            ("breaker", "escalated", "circuit_breaker", 12),
            ("completes", "completed", "completed", 22),
            ("regression", "escalated", "regression", 14),
            ("reopened", "escalated", "max_iterations", 16),
        ],
    )
    def test_each_scenario_ends_as_designed(
        self, engine: LoopEngine, name: str, state: str, reason: str, iterations: int
    ) -> None:
        """Each scripted loop ends in the state, for the reason, at the iteration it is meant to."""
        snap = _driver.drive(engine, f"script-{name}", _driver.SCENARIOS[name])
        assert (snap.state, snap.terminal_reason, snap.iteration) == (state, reason, iterations)
        assert len(engine.history(snap.id)) == iterations
