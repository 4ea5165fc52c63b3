"""Drive an external agent command through a durable loop, iteration by iteration.

The runner owns the loop's lease for the whole run (:meth:`LoopEngine.hold`, renewed by a
heartbeat thread while the agent works). Each iteration it hands the agent the iteration's
prompt on stdin, with ``LOOPWARDEN_*`` variables in its environment, captures the tail of its
output and submits it; the engine validates, decides and checkpoints. Everything the runner
needs to continue later (the agent command, its timeout, the completion hooks) is stored in
the loop's metadata at creation, so ``loopwarden resume LOOP_ID`` needs no flags.

An agent that fails (non-zero exit, timeout, cannot start) still makes an iteration: its
output says so on a line starting with :data:`AGENT_FAILED`, and what it printed is quoted in
fenced blocks, so a failed run makes no promises. The ``agent`` rule that every CLI loop
carries fails on that line, so a crashing agent counts towards the circuit breaker.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from loopwarden import process, rules
from loopwarden.engine import LoopEngine
from loopwarden.errors import (
    ConfigError,
    InvalidTransitionError,
    LeaseHeldError,
    LoopwardenError,
    StaleOwnerError,
)
from loopwarden.hooks import completion
from loopwarden.logs import get_logger
from loopwarden.model import (
    Decision,
    LoopSnapshot,
    State,
    TerminalReason,
    ValidationReport,
)

__all__ = [
    "AGENT_FAILED",
    "AGENT_RULE",
    "AgentFinished",
    "AgentRun",
    "AgentStarted",
    "ExitCode",
    "IterationDone",
    "Outcome",
    "RunEvent",
    "RunFinished",
    "RunLog",
    "RunSettings",
    "RunStarted",
    "Runner",
    "Terminated",
    "agent_output",
    "agent_rule",
    "event_lines",
    "exit_code_for",
]

AGENT_FAILED = "loopwarden: agent failed:"
AGENT_RULE = "agent"
METADATA_KEY = "runner"
_QUOTED_LIMIT = 4000


class ExitCode(IntEnum):
    """The process exit codes of ``loopwarden run`` / ``resume`` (documented in docs/cli.md)."""

    COMPLETED = 0
    FAILED = 1
    USAGE = 2
    BLOCKED_BY_AGENT = 3
    BLOCKED_BY_USER = 4
    ESCALATED_BY_AGENT = 5
    ESCALATED_BY_HOOK = 6
    MAX_ITERATIONS = 7
    CIRCUIT_BREAKER = 8
    REGRESSION = 9
    ESCALATED_BY_GUARD = 10
    BUSY = 75
    INTERRUPTED = 130
    TERMINATED = 143


_BY_REASON: dict[TerminalReason, ExitCode] = {
    TerminalReason.COMPLETED: ExitCode.COMPLETED,
    TerminalReason.BLOCKED_BY_AGENT: ExitCode.BLOCKED_BY_AGENT,
    TerminalReason.BLOCKED_BY_USER: ExitCode.BLOCKED_BY_USER,
    TerminalReason.ESCALATED_BY_AGENT: ExitCode.ESCALATED_BY_AGENT,
    TerminalReason.ESCALATED_BY_HOOK: ExitCode.ESCALATED_BY_HOOK,
    TerminalReason.MAX_ITERATIONS: ExitCode.MAX_ITERATIONS,
    TerminalReason.CIRCUIT_BREAKER: ExitCode.CIRCUIT_BREAKER,
    TerminalReason.REGRESSION: ExitCode.REGRESSION,
    TerminalReason.GUARD: ExitCode.ESCALATED_BY_GUARD,
}


def exit_code_for(snapshot: LoopSnapshot) -> ExitCode:
    """The exit code a loop's state implies: 0 only for completed; FAILED if not terminal."""
    if snapshot.state is State.COMPLETED:
        return ExitCode.COMPLETED
    if snapshot.terminal_reason is not None:
        return _BY_REASON.get(snapshot.terminal_reason, ExitCode.ESCALATED_BY_GUARD)
    if snapshot.state is State.BLOCKED:
        return ExitCode.BLOCKED_BY_USER
    if snapshot.state is State.ESCALATED:
        return ExitCode.ESCALATED_BY_GUARD
    return ExitCode.FAILED


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM, so a run stops the way Ctrl-C stops it."""


# ----- settings stored with the loop --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunSettings:
    """How ``loopwarden run`` drives a loop; stored in the loop's metadata for ``resume``."""

    agent: str
    workdir: str
    agent_timeout: float = 1800.0
    shell: bool = False
    max_output: int = 256_000
    on_complete: tuple[str, ...] = ()
    webhooks: tuple[str, ...] = ()
    hook_timeout: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.agent, str) or not self.agent.strip():
            raise ConfigError("agent", "must be a non-empty command line")
        if not self.shell:
            try:
                argv = shlex.split(self.agent)
            except ValueError as exc:
                raise ConfigError("agent", f"cannot parse {self.agent!r}: {exc}") from None
            if not argv:
                raise ConfigError("agent", "must be a non-empty command line")
        for name in ("agent_timeout", "hook_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(name, f"must be a number of seconds > 0, got {value!r}")
        if self.max_output < 1000:
            raise ConfigError("max_output", f"must be >= 1000 bytes, got {self.max_output}")

    @property
    def argv(self) -> list[str] | str:
        """What process.run gets: an argument list, or the command line when run by a shell."""
        return self.agent if self.shell else shlex.split(self.agent)

    @property
    def agent_name(self) -> str:
        """The agent's executable name only: arguments may hold secrets."""
        try:
            words = shlex.split(self.agent)
        except ValueError:
            words = self.agent.split()
        first = next((w for w in words if "=" not in w or w.startswith(("/", "."))), "")
        return os.path.basename(first) or "agent"

    def missing(self) -> str | None:
        """Why the agent cannot be run, or None (a shell command line is not checked)."""
        if self.shell:
            return None
        argv = self.argv
        assert isinstance(argv, list)
        return process.missing_executable(argv, self.workdir)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "agent": self.agent,
            "workdir": self.workdir,
            "agent_timeout": self.agent_timeout,
            "shell": self.shell,
            "max_output": self.max_output,
            "on_complete": list(self.on_complete),
            "webhooks": list(self.webhooks),
            "hook_timeout": self.hook_timeout,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSettings:
        try:
            return cls(
                agent=str(data["agent"]),
                workdir=str(data["workdir"]),
                agent_timeout=float(data.get("agent_timeout", 1800.0)),
                shell=bool(data.get("shell", False)),
                max_output=int(data.get("max_output", 256_000)),
                on_complete=tuple(str(s) for s in data.get("on_complete", ())),
                webhooks=tuple(str(s) for s in data.get("webhooks", ())),
                hook_timeout=float(data.get("hook_timeout", 30.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                "metadata.runner", f"stored run settings are unreadable: {exc}"
            ) from None

    @classmethod
    def of(cls, snapshot: LoopSnapshot) -> RunSettings | None:
        """The settings stored with a loop, or None when it was not created by the runner."""
        data = snapshot.metadata.get(METADATA_KEY)
        if not isinstance(data, Mapping):
            return None
        return cls.from_dict(data)

    def metadata(self) -> dict[str, Any]:
        """The loop metadata that carries these settings."""
        return {METADATA_KEY: self.to_dict()}


def agent_rule() -> rules.Rule:
    """The rule every CLI loop carries: the agent command must not have failed."""
    return rules.pattern(AGENT_RULE, "^" + AGENT_FAILED, must_match=False)


# ----- the agent's output -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AgentRun:
    """How one run of the agent command went."""

    exit_code: int | None
    duration: float
    timed_out: bool = False
    error: str | None = None
    output_chars: int = 0
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.error is None

    def describe(self) -> str:
        if self.error:
            return self.error
        if self.timed_out:
            return f"timed out after {self.duration:.1f}s and was killed"
        return f"exit {self.exit_code} in {self.duration:.1f}s"

    def to_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "duration_seconds": round(self.duration, 3),
            "timed_out": self.timed_out,
            "error": self.error,
            "output_chars": self.output_chars,
            "truncated": self.truncated,
        }


def _fence(text: str) -> str:
    """``text`` in a fenced block longer than any backtick run inside it."""
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text.rstrip()}\n{fence}"


def _last(text: str, limit: int = _QUOTED_LIMIT) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


def agent_output(result: process.ProcessResult, timeout: float) -> str:
    """What is submitted for one run of the agent.

    Success: its stdout (a note first when only the tail was kept). Failure: a line starting
    with :data:`AGENT_FAILED`, then stdout and stderr quoted, so promises in them do not count.
    """
    if result.ok:
        note = "loopwarden: agent output truncated; this is its tail\n"
        return (note if result.stdout_truncated else "") + result.stdout
    name = os.path.basename(result.argv[0]) if result.argv else "agent"
    if result.error:
        why = result.error
    elif result.timed_out:
        why = f"{name} timed out after {timeout:g}s and was killed"
    else:
        why = f"{name} exited with status {result.returncode}"
    parts = [f"{AGENT_FAILED} {why}"]
    if result.stdout.strip():
        parts.append("stdout (tail):\n" + _fence(_last(result.stdout)))
    if result.stderr.strip():
        parts.append("stderr (tail):\n" + _fence(_last(result.stderr)))
    return "\n".join(parts) + "\n"


# ----- events -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunStarted:
    """The runner holds the loop and is about to drive it."""

    snapshot: LoopSnapshot
    resumed: bool
    agent: str


@dataclass(frozen=True, slots=True)
class AgentStarted:
    """The agent command was started for an iteration."""

    loop_id: str
    iteration: int
    max_iterations: int
    started: float


@dataclass(frozen=True, slots=True)
class AgentFinished:
    """The agent command ended; its output is being validated."""

    loop_id: str
    iteration: int
    max_iterations: int
    agent: AgentRun


@dataclass(frozen=True, slots=True)
class IterationDone:
    """An iteration was decided. ``agent`` is None when it was finished by a resume."""

    loop_id: str
    task_id: str
    iteration: int
    max_iterations: int
    decision: Decision
    report: ValidationReport | None
    agent: AgentRun | None

    def to_dict(self) -> dict[str, Any]:
        d = self.decision
        return {
            "event": "iteration",
            "loop_id": self.loop_id,
            "task_id": self.task_id,
            "iteration": self.iteration,
            "max_iterations": self.max_iterations,
            "agent": self.agent.to_dict() if self.agent else None,
            "rules": [r.to_dict() for r in self.report.results] if self.report else None,
            "score": d.score,
            "passed": d.passed,
            "signal": d.signal.value,
            "state": d.state.value,
            "reason": d.reason,
            "terminal_reason": d.terminal_reason.value if d.terminal_reason else None,
            "feedback": list(d.feedback),
        }


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended. ``status`` is the loop's terminal state, ``failed`` or ``interrupted``."""

    loop_id: str
    task_id: str
    status: str
    exit_code: ExitCode
    terminal_reason: TerminalReason | None
    reason: str
    iterations: int
    max_iterations: int
    started_at: float
    finished_at: float
    snapshot: LoopSnapshot | None = None
    error: str | None = None
    already_finished: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": "finished",
            "loop_id": self.loop_id,
            "task_id": self.task_id,
            "status": self.status,
            "state": self.snapshot.state.value if self.snapshot else None,
            "terminal_reason": self.terminal_reason.value if self.terminal_reason else None,
            "reason": self.reason,
            "exit_code": int(self.exit_code),
            "iterations": self.iterations,
            "max_iterations": self.max_iterations,
            "duration_seconds": round(self.finished_at - self.started_at, 3),
            "scores": list(self.snapshot.scores) if self.snapshot else [],
            "error": self.error,
            "already_finished": self.already_finished,
        }


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The run is over (the loop is terminal, or the run failed or was interrupted)."""

    outcome: Outcome


RunEvent = RunStarted | AgentStarted | AgentFinished | IterationDone | RunFinished


def _short(text: str, limit: int = 160) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def event_lines(event: RunEvent) -> list[str]:
    """The plain-text lines for one event: what a non-terminal prints and the run log keeps."""
    if isinstance(event, RunStarted):
        s = event.snapshot
        verb = "resuming" if event.resumed else "starting"
        where = f" at iteration {s.iteration}" if event.resumed and s.iteration else ""
        return [
            f"loopwarden: {verb} loop {s.id} (task {s.task_id}){where}, "
            f"max {s.max_iterations} iterations, agent {event.agent}"
        ]
    if isinstance(event, AgentStarted):
        return [f"[{event.iteration}/{event.max_iterations}] agent running"]
    if isinstance(event, AgentFinished):
        return [f"[{event.iteration}/{event.max_iterations}] agent {event.agent.describe()}"]
    if isinstance(event, IterationDone):
        tag = f"[{event.iteration}/{event.max_iterations}]"
        lines = []
        if event.agent is None:
            lines.append(f"{tag} finished from its checkpoint (resumed)")
        for r in event.report.results if event.report else ():
            last = r.message.strip().splitlines()[-1] if r.message.strip() else ""
            said = "" if r.passed else f" {_short(last)}"
            lines.append(f"{tag}   {r.name}: {r.status.value} ({r.duration:.2f}s){said}")
        d = event.decision
        lines.append(f"{tag} score {d.score:g} · {d.signal.value} · {_short(d.reason, 300)}")
        return lines
    o = event.outcome
    if o.status == "interrupted":
        return [f"loopwarden: interrupted; resume with: loopwarden resume {o.loop_id}"]
    if o.status == "failed":
        return [f"loopwarden: run failed: {o.error or o.reason}"]
    what = o.terminal_reason.value if o.terminal_reason else o.status
    if o.already_finished:
        hint = ""
        if o.status in (State.BLOCKED.value, State.ESCALATED.value):
            hint = (
                f"; to continue: loopwarden reopen {o.loop_id}, then loopwarden resume {o.loop_id}"
            )
        return [
            f"loopwarden: loop {o.loop_id} is already {o.status} ({what}): "
            f"{_short(o.reason, 300)}{hint} [exit {int(o.exit_code)}]"
        ]
    return [
        f"loopwarden: loop {o.loop_id} {o.status} ({what}) after {o.iterations} "
        f"iteration(s): {_short(o.reason, 300)} [exit {int(o.exit_code)}]"
    ]


class RunLog:
    """The lines a run printed, bounded: the completion hooks' ``log_tail`` comes from here."""

    def __init__(self, limit: int = 64_000) -> None:
        self.limit = limit
        self._lines: deque[str] = deque()
        self._size = 0
        self._lock = threading.Lock()

    def write(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)
            self._size += len(line) + 1
            while self._size > self.limit and len(self._lines) > 1:
                self._size -= len(self._lines.popleft()) + 1

    def text(self) -> str:
        with self._lock:
            return "\n".join(self._lines) + ("\n" if self._lines else "")


# ----- running the agent (the runner's and the workers') -------------------------------------


def reap_orphaned_agent(engine: LoopEngine, snapshot: LoopSnapshot) -> None:
    """A driver killed mid-iteration leaves its agent running in its own session: stop it
    before the iteration is handed out again, so two agents never work on one loop at once."""
    agent = snapshot.metadata.get("agent_process")
    if not isinstance(agent, dict):
        return
    if agent.get("host") == socket.gethostname():
        pgid = agent.get("pgid")
        if isinstance(pgid, int) and process.kill_group_if_same(pgid, agent.get("started")):
            get_logger().warning("orphaned_agent_killed", loop_id=snapshot.id, pgid=pgid)
    engine.update_metadata(snapshot.id, {"agent_process": None})


def run_agent(
    engine: LoopEngine,
    settings: RunSettings,
    snapshot: LoopSnapshot,
    cancel: threading.Event | None = None,
) -> tuple[AgentRun, str]:
    """Run the agent once on the iteration's prompt; its process is recorded with the loop
    while it runs (see :func:`reap_orphaned_agent`). Returns what happened and the output to
    submit."""

    def record(pid: int) -> None:
        started = process.start_time(pid)
        agent = {"pgid": pid, "host": socket.gethostname(), "started": started}
        engine.update_metadata(snapshot.id, {"agent_process": agent})

    result = process.run(
        settings.argv,
        input=snapshot.current_prompt,
        shell=settings.shell,
        cwd=settings.workdir,
        timeout=settings.agent_timeout,
        max_output=settings.max_output,
        keep="tail",
        grace=5.0,
        cancel=cancel,
        on_start=record,
        extra_env={
            "LOOPWARDEN_LOOP_ID": snapshot.id,
            "LOOPWARDEN_TASK_ID": snapshot.task_id,
            "LOOPWARDEN_ITERATION": str(snapshot.iteration),
            "LOOPWARDEN_MAX_ITERATIONS": str(snapshot.max_iterations),
        },
    )
    with contextlib.suppress(LoopwardenError):
        engine.update_metadata(snapshot.id, {"agent_process": None})
    run = AgentRun(
        exit_code=result.returncode,
        duration=result.duration,
        timed_out=result.timed_out,
        error=result.error,
        output_chars=len(result.stdout),
        truncated=result.stdout_truncated,
    )
    return run, agent_output(result, settings.agent_timeout)


# ----- the runner ---------------------------------------------------------------------------


class _Heartbeat:
    """Renews a held lease from a thread; remembers if it was lost."""

    def __init__(self, engine: LoopEngine, loop_id: str, interval: float) -> None:
        self.engine = engine
        self.loop_id = loop_id
        self.interval = interval
        self.lost: str | None = None
        # Set when the lease is lost (a `loopwarden block` takes it): stops a running agent.
        self.lost_event = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loopwarden-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.engine.renew(self.loop_id)
            except StaleOwnerError as exc:
                self.lost = str(exc)
                self.lost_event.set()
                return
            except Exception as exc:  # a busy database: try again on the next beat
                get_logger().warning("lease_renew_failed", loop_id=self.loop_id, error=str(exc))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)


@dataclass
class Runner:
    """Drives one loop with an agent command until it is terminal (or the run is stopped)."""

    engine: LoopEngine
    settings: RunSettings
    on_event: Callable[[RunEvent], None] | None = None
    log: RunLog = field(default_factory=RunLog)
    heartbeat: float | None = None

    def emit(self, event: RunEvent) -> None:
        for line in event_lines(event):
            self.log.write(line)
        if self.on_event is not None:
            self.on_event(event)

    def drive(self, loop_id: str, *, resumed: bool = False) -> Outcome:
        """Run the loop to a terminal state; never raises except LeaseHeldError (nothing done).

        Ctrl-C (or SIGTERM, as :class:`Terminated`) stops the agent's process group and
        returns an ``interrupted`` outcome with the loop left resumable.
        """
        started = time.time()
        snapshot: LoopSnapshot | None = None
        try:
            with self._held(loop_id) as beat:
                before = self.engine.get(loop_id)
                if before.terminal:
                    outcome = outcome_of(before, started, already=True)
                    self.emit(RunFinished(outcome))
                    return outcome
                self.emit(RunStarted(before, resumed, self.settings.agent_name))
                snapshot = self._loop(before, beat)
                outcome = outcome_of(snapshot, started)
        except LeaseHeldError:
            raise
        except KeyboardInterrupt as exc:
            code = ExitCode.TERMINATED if isinstance(exc, Terminated) else ExitCode.INTERRUPTED
            outcome = self._stopped(loop_id, started, "interrupted", code, "interrupted")
        except LoopwardenError as exc:
            outcome = self._stopped(loop_id, started, "failed", ExitCode.FAILED, str(exc))
        except Exception as exc:
            detail = f"internal error: {type(exc).__name__}: {exc}"
            outcome = self._stopped(loop_id, started, "failed", ExitCode.FAILED, detail)
        self.emit(RunFinished(outcome))
        return outcome

    @contextlib.contextmanager
    def _held(self, loop_id: str) -> Iterator[_Heartbeat]:
        with self.engine.hold(loop_id):
            interval = self.heartbeat or max(0.05, min(2.0, self.engine.lease_ttl / 3))
            beat = _Heartbeat(self.engine, loop_id, interval)
            try:
                yield beat
            finally:
                beat.stop()

    def _loop(self, before: LoopSnapshot, beat: _Heartbeat) -> LoopSnapshot:
        engine, loop_id = self.engine, before.id
        reap_orphaned_agent(engine, before)
        snapshot = engine.resume(loop_id)
        if before.state in (State.VALIDATING, State.DECIDING) and snapshot.last_decision:
            self._done(snapshot, snapshot.last_decision, None)
        while not snapshot.terminal:
            if snapshot.state is not State.EXECUTING:
                raise InvalidTransitionError(
                    loop_id, snapshot.state.value, "run", "expected it to be executing"
                )
            self.emit(
                AgentStarted(loop_id, snapshot.iteration, snapshot.max_iterations, time.time())
            )
            agent, output = run_agent(engine, self.settings, snapshot, beat.lost_event)
            self.emit(AgentFinished(loop_id, snapshot.iteration, snapshot.max_iterations, agent))
            if beat.lost is not None:
                return self._after_lost_lease(loop_id, beat.lost)
            try:
                decision = engine.submit(loop_id, output)
            except (StaleOwnerError, InvalidTransitionError) as exc:
                return self._after_lost_lease(loop_id, str(exc))
            snapshot = engine.get(loop_id)
            self._done(snapshot, decision, agent)
        return snapshot

    def _after_lost_lease(self, loop_id: str, why: str) -> LoopSnapshot:
        """Someone else moved the loop (``loopwarden block`` takes the lease): report where it
        is if that is terminal, else fail."""
        snapshot = self.engine.get(loop_id)
        if snapshot.terminal:
            return snapshot
        raise StaleOwnerError(why)

    def _done(self, snapshot: LoopSnapshot, decision: Decision, agent: AgentRun | None) -> None:
        self.emit(
            IterationDone(
                loop_id=snapshot.id,
                task_id=snapshot.task_id,
                iteration=decision.iteration,
                max_iterations=snapshot.max_iterations,
                decision=decision,
                report=self._report(snapshot, decision),
                agent=agent,
            )
        )

    def _report(self, snapshot: LoopSnapshot, decision: Decision) -> ValidationReport | None:
        """The rule results of the iteration just decided: the checkpoint before the decision."""
        if snapshot.seq < 2:
            return None
        try:
            checkpoint = self.engine.checkpoint(snapshot.id, snapshot.seq - 1)
        except LookupError:
            return None
        if checkpoint.state is not State.DECIDING or checkpoint.iteration != decision.iteration:
            return None
        try:
            return ValidationReport.from_dict(checkpoint.data["evidence"]["report"])
        except (KeyError, TypeError, ValueError):
            return None

    def _stopped(
        self, loop_id: str, started: float, status: str, code: ExitCode, detail: str
    ) -> Outcome:
        snapshot: LoopSnapshot | None = None
        with contextlib.suppress(Exception):
            snapshot = self.engine.get(loop_id)
        return Outcome(
            loop_id=loop_id,
            task_id=snapshot.task_id if snapshot else "",
            status=status,
            exit_code=code,
            terminal_reason=snapshot.terminal_reason if snapshot else None,
            reason=detail,
            iterations=decided(snapshot) if snapshot else 0,
            max_iterations=snapshot.max_iterations if snapshot else 0,
            started_at=started,
            finished_at=time.time(),
            snapshot=snapshot,
            error=None if status == "interrupted" else detail,
        )


def outcome_of(snapshot: LoopSnapshot, started: float, *, already: bool = False) -> Outcome:
    """The outcome of a run that left the loop in ``snapshot``'s state."""
    return Outcome(
        loop_id=snapshot.id,
        task_id=snapshot.task_id,
        status=snapshot.state.value if snapshot.terminal else "failed",
        exit_code=exit_code_for(snapshot),
        terminal_reason=snapshot.terminal_reason,
        reason=snapshot.reason,
        iterations=decided(snapshot),
        max_iterations=snapshot.max_iterations,
        started_at=started,
        finished_at=time.time(),
        snapshot=snapshot,
        already_finished=already,
    )


HOOKS_FIRED_KEY = "completion_hooks_fired_seq"


def fire_completion_hooks(
    engine: LoopEngine,
    outcome: Outcome,
    settings: RunSettings,
    log: RunLog,
    warn: Callable[[str], None],
) -> None:
    """Tell the completion hooks how a run ended; a terminal outcome only once.

    The loop's metadata records the checkpoint the hooks fired for, so a driver killed
    between the end and its hooks leaves them to the next one (``resume``, a worker), and a
    driver that finds them fired does not fire them again. Failures only warn.
    """
    if not (settings.on_complete or settings.webhooks):
        return
    snapshot = outcome.snapshot
    terminal = snapshot is not None and snapshot.terminal
    if snapshot is not None and terminal and snapshot.metadata.get(HOOKS_FIRED_KEY) == snapshot.seq:
        return
    scores: list[float] = []
    with contextlib.suppress(LoopwardenError):
        scores = engine.scores(outcome.loop_id)[-100:]
    payload = completion.build_payload(
        loop_id=outcome.loop_id,
        task_id=outcome.task_id,
        status=outcome.status,
        terminal_reason=outcome.terminal_reason.value if outcome.terminal_reason else None,
        reason=outcome.reason,
        exit_code=int(outcome.exit_code),
        iterations=outcome.iterations,
        max_iterations=outcome.max_iterations,
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
        score_history=scores,
        agent_command=settings.agent_name,
        git_branch=completion.git_branch(settings.workdir),
        log=log.text(),
    )
    completion.fire(
        payload,
        scripts=settings.on_complete,
        webhooks=settings.webhooks,
        timeout=settings.hook_timeout,
        cwd=settings.workdir,
        warn=warn,
    )
    if snapshot is not None and terminal:
        with contextlib.suppress(LoopwardenError):
            engine.update_metadata(snapshot.id, {HOOKS_FIRED_KEY: snapshot.seq})


def decided(snapshot: LoopSnapshot) -> int:
    """How many iterations of a loop have been decided."""
    return snapshot.last_decision.iteration if snapshot.last_decision else 0
