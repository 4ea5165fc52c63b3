"""Scripted loops for the crash test: deterministic agent outputs, deterministic rules, one driver.

The same :func:`drive` runs in a forked child that gets killed and in the parent that finishes
the loop, so every resume walks the same script. The driver is stateless: it reads the loop's
stored state and does the next step, which is what makes it safe to restart at any instant.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loopwarden import (
    LoopConfig,
    LoopEngine,
    LoopNotFoundError,
    LoopSnapshot,
    State,
    TerminalReason,
    rules,
)


def _mentions_tests(submission: rules.Submission) -> tuple[bool, str]:
    return "tests: ok" in submission.output, "the output must report 'tests: ok'"


def _context_in_step(submission: rules.Submission) -> tuple[bool, str]:
    # The context is merged on submit and must be the one stored with this iteration's output.
    step = submission.context.get("step")
    return step == submission.iteration, f"context step {step} != iteration {submission.iteration}"


RULES = (
    rules.pattern("has-summary", r"^Summary:"),
    rules.pattern("no-todo", r"TODO", must_match=False),
    rules.predicate("crash-mentions-tests", _mentions_tests),
    rules.predicate("crash-context-step", _context_in_step),
)


def _output(i: int, *, todo: bool = False, tests: bool = True, tail: str = "") -> str:
    lines = [f"Summary: iteration {i}", "tests: ok" if tests else "tests: 1 failed"]
    if todo:
        lines.append("TODO: tidy up")
    if tail:
        lines.append(tail)
    return "\n".join(lines)


def _completes(i: int) -> str:
    # Fails now and then (never 3 in a row, never 3 falling scores), a rejected claim at 9,
    # a verified completion at 22.
    tail = "<promise>COMPLETE</promise> done" if i in (9, 22) else ""
    return _output(i, todo=i % 3 == 0, tests=i % 5 != 0, tail=tail)


def _breaker(i: int) -> str:
    return _output(i, tests=i < 10)


def _regression(i: int) -> str:
    # Scores 100, 75, 50 at iterations 12-14: three strictly falling, a drop of 50 > 10.
    return _output(i, todo=i >= 13, tests=i < 14)


def _blocked(i: int) -> str:
    tail = "<promise>BLOCKED: no credentials for the staging database</promise>" if i == 11 else ""
    return _output(i, todo=i % 4 == 0, tail=tail)


def _keeps_going(i: int) -> str:
    return _output(i, todo=i % 2 == 0)


@dataclass(frozen=True)
class Scenario:
    """One scripted loop: its config, the agent's output for each iteration, and reopens."""

    name: str
    output: Callable[[int], str]
    max_iterations: int
    threshold: int = 3
    # Reopen a loop escalated at max_iterations, adding this many, until the budget reaches
    # ``final_max``.
    extension: int = 0
    final_max: int = 0

    def config(self) -> LoopConfig:
        return LoopConfig(
            max_iterations=self.max_iterations,
            circuit_breaker_threshold=self.threshold,
            regression_window=3,
            regression_min_drop=10.0,
            rules=RULES,
        )

    def wants_reopen(self, snap: LoopSnapshot) -> bool:
        return (
            snap.terminal_reason is TerminalReason.MAX_ITERATIONS
            and snap.max_iterations < self.final_max
        )


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("completes", _completes, max_iterations=30, threshold=4),
        Scenario("breaker", _breaker, max_iterations=30),
        Scenario("regression", _regression, max_iterations=30),
        Scenario("blocked", _blocked, max_iterations=30),
        Scenario("reopened", _keeps_going, max_iterations=6, extension=5, final_max=16),
    )
}


def drive(engine: LoopEngine, loop_id: str, scenario: Scenario) -> LoopSnapshot:
    """Create the loop if it is not there, then resume it and submit until it is terminal."""
    try:
        engine.get(loop_id)
    except LoopNotFoundError:
        engine.start(
            f"crash-{scenario.name}",
            scenario.config(),
            prompt=f"Run the {scenario.name} script",
            context={"branch": "main"},
            loop_id=loop_id,
        )
    with engine.hold(loop_id):
        while True:
            snap = engine.resume(loop_id)
            if snap.state is State.EXECUTING:
                i = snap.iteration
                engine.submit(
                    loop_id,
                    scenario.output(i),
                    files_modified=[f"src/step_{i}.py"],
                    context={"step": i},
                )
            elif scenario.wants_reopen(snap):
                engine.reopen(
                    loop_id,
                    extra_iterations=scenario.extension,
                    note=f"budget raised from {snap.max_iterations}",
                )
            else:
                return snap


def _strip_durations(value: Any) -> Any:
    """JSON with every timing field removed: the one thing a replay may change."""
    if isinstance(value, dict):
        return {k: _strip_durations(v) for k, v in value.items() if k != "duration"}
    if isinstance(value, list):
        return [_strip_durations(v) for v in value]
    return value


def stored_rows(path: str, loop_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The loop's checkpoint and iteration rows as stored, read with plain sqlite3."""
    con = sqlite3.connect(path)
    try:
        checkpoints = [
            (seq, state, iteration, trigger, _strip_durations(json.loads(data)))
            for seq, state, iteration, trigger, data in con.execute(
                "SELECT seq, state, iteration, trigger, data FROM lw_checkpoints "
                "WHERE loop_id = ? ORDER BY seq",
                (loop_id,),
            )
        ]
        iterations = [
            (*row[:-1], json.loads(row[-1]))
            for row in con.execute(
                "SELECT iteration, executing_seq, validating_seq, deciding_seq, decided_seq, "
                "signal, score, passed, terminal_reason, decision FROM lw_iterations "
                "WHERE loop_id = ? ORDER BY iteration",
                (loop_id,),
            )
        ]
    finally:
        con.close()
    return checkpoints, iterations


def final_record(engine: LoopEngine, loop_id: str) -> dict[str, Any]:
    """Everything a finished loop's record says, minus times and owners."""
    snap = engine.get(loop_id)
    return {
        "state": snap.state,
        "terminal_reason": snap.terminal_reason,
        "reason": snap.reason,
        "iteration": snap.iteration,
        "max_iterations": snap.max_iterations,
        "seq": snap.seq,
        "context": snap.context,
        "scores": snap.scores,
        "consecutive_failures": snap.consecutive_failures,
        "current_prompt": snap.current_prompt,
        "checkpoints": [
            (c.seq, c.state, c.iteration, c.trigger, _strip_durations(c.data))
            for c in engine.checkpoints(loop_id)
        ],
        "history": [
            (
                r.iteration,
                r.signal,
                r.score,
                r.reason,
                r.decision.feedback,
                r.decision.terminal_reason,
                r.prompt,
                r.output,
                r.files_modified,
            )
            for r in engine.history(loop_id)
        ],
    }


class SimulatedCrash(BaseException):
    """Stands in for the process dying: not an Exception, so nothing on the way catches it."""


class CrashAfter:
    """A logger for ``LoopEngine(logger=...)`` that "dies" right after entering ``state``.

    The engine logs each transition after its transaction commits, so raising here leaves the
    loop stored in ``state`` exactly as a crash at that instant would.
    """

    def __init__(self, state: str) -> None:
        self.state = state

    def info(self, event: str, **fields: Any) -> None:
        if event == "transition" and fields.get("to_state") == self.state:
            raise SimulatedCrash(f"simulated crash after entering {self.state}")

    def warning(self, event: str, **fields: Any) -> None:
        del event, fields

    debug = error = warning


def leave_in(url: str, loop_id: str, state: str, output: str = "work", **submit: Any) -> None:
    """Submit ``output`` with an engine that dies after entering ``state`` (validating/deciding)."""
    engine = LoopEngine(url, logger=CrashAfter(state))
    try:
        engine.submit(loop_id, output, **submit)
    except SimulatedCrash:
        pass
    else:  # pragma: no cover - a broken helper, not a broken engine
        raise AssertionError(f"submit did not pass through {state}")
    finally:
        engine.close()
