"""Workers: claim runnable loops from a shared database and drive them, on any number of hosts.

A loop is runnable when its next step is engine work: it is ``validating`` or ``deciding``
(finish the iteration from what is stored), or ``initialized`` / ``executing`` with an agent
command stored in its metadata by :func:`enqueue` or ``loopwarden run`` (run the agent with the
iteration's prompt and submit its output), and nobody holds a live lease on it.

Each worker slot has its own engine (its own connection and owner id). A slot claims one loop
at a time in a short transaction (``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL; an
IMMEDIATE transaction on SQLite) that reserves the loop's lease, then drives it step by step
under the engine's lease and epoch fencing until it is terminal. One heartbeat thread per
process renews every lease the process holds, so a long agent run or validation never lets a
lease lapse while the process is alive.

Failures: a worker that is stopped (SIGTERM, SIGINT) finishes the step it is in, releases its
leases and exits. A worker that dies (SIGKILL, lost host) stops renewing; its loops are
claimed by other workers once the lease expires, and anything it still tries to write is
rejected by the epoch check, so no step is applied twice. A worker frozen past its lease
(SIGSTOP, a long GC pause, a partitioned network) finds its writes rejected when it wakes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from loopwarden.engine import LoopEngine
from loopwarden.errors import (
    ConfigError,
    CorruptRecordError,
    InvalidTransitionError,
    LeaseError,
    LoopwardenError,
    StaleOwnerError,
    StoreError,
    UnresolvedReferenceError,
)
from loopwarden.hooks.command import CommandHooks
from loopwarden.logs import get_logger
from loopwarden.model import LoopConfig, LoopSnapshot, State
from loopwarden.runner import (
    AGENT_RULE,
    METADATA_KEY,
    RunLog,
    RunSettings,
    agent_rule,
    fire_completion_hooks,
    outcome_of,
    reap_orphaned_agent,
    run_agent,
)

__all__ = ["AGENT_MARKER", "WorkerReport", "enqueue", "run_worker"]

_HOST = socket.gethostname()
# How a loop's stored metadata JSON marks an agent command (see runner.RunSettings.metadata).
AGENT_MARKER = f'%"{METADATA_KEY}":{{%'
# A loop a slot could not drive (a rule or hook not registered in this process, a corrupt
# row) is left alone by this process for this long, so slots do not spin on it.
_SKIP_SECONDS = 300.0


def enqueue(
    engine: LoopEngine,
    task_id: str,
    config: LoopConfig | None = None,
    *,
    prompt: str,
    agent: str | RunSettings,
    workdir: str | None = None,
    agent_timeout: float = 1800.0,
    shell: bool = False,
    on_complete: Sequence[str] = (),
    webhooks: Sequence[str] = (),
    context: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    loop_id: str | None = None,
) -> LoopSnapshot:
    """Queue a loop for the workers (``loopwarden run --detach``): created, not started.

    ``agent`` is the agent command line (or ready-made RunSettings, as ``loopwarden run``
    builds them); it is stored in the loop's metadata, where workers and ``loopwarden
    resume`` find it. Like every CLI loop, the loop gets the ``agent`` rule (an agent that
    fails makes a failed iteration) unless its config already has a rule of that name.
    """
    if isinstance(agent, RunSettings):
        settings = agent
    else:
        settings = RunSettings(
            agent=agent,
            workdir=os.path.abspath(workdir or os.getcwd()),
            agent_timeout=agent_timeout,
            shell=shell,
            on_complete=tuple(on_complete),
            webhooks=tuple(webhooks),
        )
    config = config if config is not None else LoopConfig()
    if not isinstance(config, LoopConfig):
        raise ConfigError("config", f"must be a LoopConfig, got {type(config).__name__}")
    if all(rule.name != AGENT_RULE for rule in config.rules):
        config = config.with_changes(rules=[agent_rule(), *config.rules])
    if config.workdir is None:
        config = config.with_changes(workdir=settings.workdir)
    meta = {**(metadata or {}), **settings.metadata()}
    return engine.create(
        task_id, config, prompt=prompt, context=context, metadata=meta, loop_id=loop_id
    )


@dataclass
class WorkerReport:
    """What a worker process did, returned by :func:`run_worker` when it stops."""

    owner: str
    loops_claimed: int = 0
    loops_finished: int = 0
    steps: int = 0
    leases_lost: int = 0
    errors: int = 0
    finished: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "loops_claimed": self.loops_claimed,
            "loops_finished": self.loops_finished,
            "steps": self.steps,
            "leases_lost": self.leases_lost,
            "errors": self.errors,
        }


class _Heartbeat:
    """Renews every lease this process holds, from one thread, through each slot's engine.

    ``LoopEngine.renew`` waits only for the database lock, which a slot's transaction holds for
    microseconds, so a slot running a long agent or validation never lets its lease lapse.
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._held: dict[str, LoopEngine] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loopwarden-heartbeat", daemon=True)
        self._thread.start()

    def add(self, loop_id: str, engine: LoopEngine) -> None:
        with self._lock:
            self._held[loop_id] = engine

    def remove(self, loop_id: str) -> None:
        with self._lock:
            self._held.pop(loop_id, None)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                held = list(self._held.items())
            for loop_id, engine in held:
                try:
                    engine.renew(loop_id)
                except StaleOwnerError:
                    self.remove(loop_id)  # the slot finds out at its next fenced write
                except Exception as exc:
                    get_logger().warning("lease_renew_failed", loop_id=loop_id, error=str(exc))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10.0)


@dataclass
class _Shared:
    url: str
    lease_ttl: float
    poll_interval: float
    exit_when_idle: bool
    max_loops: int | None
    stop: threading.Event
    heartbeat: _Heartbeat
    report: WorkerReport
    lock: threading.Lock = field(default_factory=threading.Lock)
    skip: dict[str, float] = field(default_factory=dict)
    on_finished: Callable[[LoopSnapshot], None] | None = None

    def budget(self) -> bool:
        """Take one loop from the budget (``max_loops``); False when it is used up."""
        with self.lock:
            if self.max_loops is not None and self.report.loops_claimed >= self.max_loops:
                return False
            self.report.loops_claimed += 1
            return True

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self.report, name, getattr(self.report, name) + n)


class _Slot:
    """One worker slot: its own engine, claiming and driving one loop at a time."""

    def __init__(self, shared: _Shared, index: int) -> None:
        self.shared = shared
        self.owner = f"worker:{_HOST}:{os.getpid()}:{index}:{uuid.uuid4().hex[:8]}"
        self.engine = self._engine()
        self.log = get_logger().bind(worker=self.owner)

    def _engine(self) -> LoopEngine:
        """An engine of this slot's; like ``loopwarden run``, it consults the command hooks."""
        engine = LoopEngine(self.shared.url, owner=self.owner, lease_ttl=self.shared.lease_ttl)
        engine.stop_checkers.append(CommandHooks(engine=engine))
        return engine

    def run(self) -> None:
        shared = self.shared
        try:
            while not shared.stop.is_set():
                try:
                    loop_id = self._claim()
                except StoreError as exc:
                    shared.count("errors")
                    self.log.warning("claim_failed", error=str(exc))
                    shared.stop.wait(shared.poll_interval)
                    self._reconnect()
                    continue
                if loop_id is None:
                    if shared.exit_when_idle:
                        return
                    # Jitter keeps idle workers from polling in lockstep.
                    shared.stop.wait(shared.poll_interval * (0.5 + (os.getpid() % 97) / 97))
                    continue
                self._drive(loop_id)
        finally:
            self.engine.close()

    def _reconnect(self) -> None:
        """A new engine (connection) after a database error; the old leases lapse or are ours."""
        with contextlib.suppress(Exception):
            self.engine.close()
        try:
            self.engine = self._engine()
        except LoopwardenError as exc:
            self.log.warning("reconnect_failed", error=str(exc))

    def _claim(self) -> str | None:
        """Reserve the lease of the oldest runnable loop nobody holds, in one short transaction."""
        shared = self.shared
        now = time.time()
        with shared.lock:
            shared.skip = {k: v for k, v in shared.skip.items() if v > now}
            skip = set(shared.skip)
        if not shared.budget():
            return None
        try:
            loop_id = self.engine.claim(AGENT_MARKER, skip=skip)
        except BaseException:
            shared.count("loops_claimed", -1)
            raise
        if loop_id is None:
            shared.count("loops_claimed", -1)
        return loop_id

    def _drive(self, loop_id: str) -> None:
        shared, log = self.shared, self.log.bind(loop_id=loop_id)
        shared.heartbeat.add(loop_id, self.engine)
        log.info("loop_claimed", at=time.time())
        started = time.time()
        runlog = RunLog()
        snapshot: LoopSnapshot | None = None
        try:
            with self.engine.hold(loop_id) as held:
                snapshot = held
                while snapshot is not None and not snapshot.terminal and not shared.stop.is_set():
                    snapshot = self._step(snapshot, runlog)
                    shared.count("steps")
        except LeaseError as exc:
            shared.count("leases_lost")
            log.warning("lease_lost", error=str(exc))
            snapshot = None
        except (UnresolvedReferenceError, CorruptRecordError, ConfigError) as exc:
            shared.count("errors")
            with shared.lock:
                shared.skip[loop_id] = time.time() + _SKIP_SECONDS
            log.error("loop_not_runnable_here", error=str(exc), retry_in=_SKIP_SECONDS)
            snapshot = None
        except LoopwardenError as exc:
            shared.count("errors")
            log.error("step_failed", error=str(exc))
            snapshot = None
        finally:
            shared.heartbeat.remove(loop_id)
            log.info("loop_released", at=time.time())
        if snapshot is not None and snapshot.terminal:
            shared.count("loops_finished")
            with shared.lock:
                shared.report.finished.append(loop_id)
            self._finished(snapshot, started, runlog)

    def _step(self, snapshot: LoopSnapshot, runlog: RunLog) -> LoopSnapshot | None:
        """One step of engine work; None when this loop is not ours to drive after all."""
        engine, loop_id = self.engine, snapshot.id
        if snapshot.state is not State.EXECUTING:
            after = engine.resume(loop_id)
            runlog.write(f"resumed from {snapshot.state.value}: now {after.state.value}")
            return after
        settings = RunSettings.of(snapshot)
        if settings is None:
            # Someone's own driver (API, MCP) owns this loop's iterations: leave it.
            return None
        runlog.write(f"iteration {snapshot.iteration}/{snapshot.max_iterations}: agent started")
        reap_orphaned_agent(engine, snapshot)
        _agent, output = run_agent(engine, settings, snapshot)
        try:
            decision = engine.submit(loop_id, output)
        except InvalidTransitionError:
            return engine.get(loop_id)  # moved on by someone else; look again
        runlog.write(
            f"iteration {decision.iteration}: {decision.signal.value} "
            f"score {decision.score:g} ({decision.reason})"
        )
        return engine.get(loop_id)

    def _finished(self, snapshot: LoopSnapshot, started: float, runlog: RunLog) -> None:
        """The loop is terminal: completion hooks, as ``loopwarden run`` fires them."""
        self.log.info(
            "loop_finished",
            loop_id=snapshot.id,
            state=snapshot.state.value,
            terminal_reason=snapshot.terminal_reason.value if snapshot.terminal_reason else None,
        )
        if self.shared.on_finished is not None:
            self.shared.on_finished(snapshot)
        try:
            settings = RunSettings.of(snapshot)
        except ConfigError:
            return
        if settings is None:
            return
        fire_completion_hooks(
            self.engine,
            outcome_of(snapshot, started),
            settings,
            runlog,
            lambda text: self.log.warning("completion_hook_failed", detail=text),
        )


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event, install: bool) -> Iterator[None]:
    """SIGTERM / SIGINT: finish the current steps and stop; a second one exits at once."""
    if not install or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            get_logger().warning("worker_killed", signal=signum)
            os._exit(128 + signum)  # leases lapse after their TTL; fencing keeps that safe
        get_logger().info("worker_stopping", signal=signum)
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run_worker(
    db_url: str | None = None,
    *,
    concurrency: int = 1,
    lease_ttl: float = 30.0,
    poll_interval: float = 1.0,
    exit_when_idle: bool = False,
    max_loops: int | None = None,
    stop: threading.Event | None = None,
    handle_signals: bool = True,
    on_finished: Callable[[LoopSnapshot], None] | None = None,
) -> WorkerReport:
    """Claim and drive runnable loops until stopped (``loopwarden worker``).

    ``concurrency`` loops are driven at once, each by its own slot and connection. Leases are
    renewed every ``lease_ttl / 3`` seconds while this process lives; a loop of a process that
    stops renewing is taken over ``lease_ttl`` seconds later. ``exit_when_idle`` stops a slot
    when it finds nothing to claim (batch runs, tests); ``max_loops`` caps the loops claimed.
    SIGTERM or SIGINT (or setting ``stop``) finishes the current steps, releases the leases
    and returns.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError("concurrency", f"must be an integer >= 1, got {concurrency!r}")
    if lease_ttl <= 0:
        raise ConfigError("lease_ttl", f"must be > 0 seconds, got {lease_ttl}")
    if poll_interval <= 0:
        raise ConfigError("poll_interval", f"must be > 0 seconds, got {poll_interval}")
    stop = stop or threading.Event()
    owner = f"worker:{_HOST}:{os.getpid()}"
    report = WorkerReport(owner=owner)
    heartbeat = _Heartbeat(interval=lease_ttl / 3)
    shared = _Shared(
        url=_url(db_url),
        lease_ttl=lease_ttl,
        poll_interval=poll_interval,
        exit_when_idle=exit_when_idle,
        max_loops=max_loops,
        stop=stop,
        heartbeat=heartbeat,
        report=report,
        on_finished=on_finished,
    )
    log = get_logger().bind(worker=owner)
    try:
        slots = [_Slot(shared, i) for i in range(concurrency)]
        log.info("worker_started", concurrency=concurrency, lease_ttl=lease_ttl)
        with _stop_on_signals(stop, handle_signals):
            threads = [
                threading.Thread(target=slot.run, name=f"loopwarden-worker-{i}", daemon=True)
                for i, slot in enumerate(slots)
            ]
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(timeout=0.2)  # wake for signals
    finally:
        heartbeat.close()
    log.info("worker_stopped", **report.to_dict())
    return report


def _url(db_url: str | None) -> str:
    from loopwarden.store import default_url, normalize_url

    return normalize_url(db_url) if db_url else default_url()
