"""The engine: the one place that orders I/O.

For each iteration: load → evidence (promises, rules) → hooks → decide → machine transition →
checkpoint. Every state a loop enters is one immutable checkpoint row written in the same
transaction that moves the loop row, fenced by the owner's lease epoch; so a loop killed at
any instant is found in exactly one state, and :meth:`LoopEngine.resume` does what that state
needs (hand back the same prompt, re-run validation from the stored output, or re-apply the
decision from the stored evidence).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loopwarden import machine
from loopwarden.decide import decide, next_counters
from loopwarden.errors import (
    ConfigError,
    CorruptRecordError,
    InvalidTransitionError,
    LeaseHeldError,
    LoopNotFoundError,
    StaleOwnerError,
    StoreError,
    UnresolvedReferenceError,
)
from loopwarden.hooks.base import StopChecker, StopContext
from loopwarden.hooks.registry import HookRegistry, ValidatorChecker
from loopwarden.hooks.stop import HookContext, HookEvaluation, evaluate_hooks
from loopwarden.logs import get_logger
from loopwarden.model import (
    JSON,
    CheckpointInfo,
    Decision,
    Evidence,
    HookVerdict,
    IterationRecord,
    LoopConfig,
    LoopSnapshot,
    Promise,
    Signal,
    State,
    StopCheck,
    TerminalReason,
    ValidationReport,
)
from loopwarden.promises import detect_promises
from loopwarden.replay import ReplayResult, override_config, replay_decisions
from loopwarden.rules import Submission, evaluate_all
from loopwarden.store import SCHEMA_VERSION, Database
from loopwarden.store.database import NO_LIMIT

__all__ = ["LoopEngine", "compose_prompt"]

_HOST = socket.gethostname()


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise CorruptRecordError(
            f"{what} holds invalid JSON ({exc}); restore it from a backup, or block this loop "
            "and start a new one"
        ) from None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def compose_prompt(prompt: str, decision: Decision | None, note: str | None = None) -> str:
    """The prompt for the next iteration: the base prompt plus the last decision's feedback."""
    base = (decision.next_prompt if decision and decision.next_prompt else None) or prompt
    lines: list[str] = []
    if decision and decision.feedback:
        lines.append(f"Feedback from iteration {decision.iteration} ({decision.reason}):")
        lines.extend(f"- {item}" for item in decision.feedback)
    if note:
        lines.append(f"Note from the operator: {note}")
    if not lines:
        return base
    return f"{base}\n\n---\n" + "\n".join(lines)


@dataclass(frozen=True, slots=True)
class _Loop:
    """The engine's working copy of one loop row."""

    id: str
    task_id: str
    parent_id: str | None
    state: State
    iteration: int
    last_decided: int
    seq: int
    config: LoopConfig
    config_json: str
    prompt: str
    current_prompt: str
    context: JSON
    context_json: str
    consecutive_failures: int
    stop_retries: int
    scores: tuple[float, ...]
    terminal_reason: TerminalReason | None
    reason: str
    meta: JSON
    meta_json: str
    created_at: float
    updated_at: float
    epoch: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> _Loop:
        where = f"loop {row['id']}"
        config_data = _loads(row["config"], f"{where}: column config")
        try:
            config = LoopConfig.from_dict(config_data)
        except ConfigError as exc:
            raise CorruptRecordError(f"{where}: stored config is invalid: {exc}") from None
        tr = row["terminal_reason"]
        try:
            terminal = TerminalReason(tr) if tr else None
        except ValueError:
            raise CorruptRecordError(f"{where}: unknown terminal reason {tr!r}") from None
        return cls(
            id=row["id"],
            task_id=row["task_id"],
            parent_id=row["parent_id"],
            state=_state(row["state"], where),
            iteration=int(row["iteration"]),
            last_decided=int(row["last_decided"]),
            seq=int(row["seq"]),
            config=config,
            config_json=row["config"],
            prompt=row["prompt"],
            current_prompt=row["current_prompt"],
            context=_loads(row["context"], f"{where}: column context"),
            context_json=row["context"],
            consecutive_failures=int(row["consecutive_failures"]),
            stop_retries=int(row["stop_retries"]),
            scores=tuple(_loads(row["scores"], f"{where}: column scores")),
            terminal_reason=terminal,
            reason=row["reason"],
            meta=_loads(row["meta"], f"{where}: column meta"),
            meta_json=row["meta"],
            created_at=float(row["created_at"]),
            updated_at=float(row["updated_at"]),
            epoch=int(row["lease_epoch"]),
        )

    def columns(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "iteration": self.iteration,
            "last_decided": self.last_decided,
            "max_iterations": self.config.max_iterations,
            "seq": self.seq,
            "config": self.config_json,
            "current_prompt": self.current_prompt,
            "context": self.context_json,
            "consecutive_failures": self.consecutive_failures,
            "stop_retries": self.stop_retries,
            "scores": _dumps(self.scores),
            "terminal_reason": self.terminal_reason.value if self.terminal_reason else None,
            "reason": self.reason,
            "meta": self.meta_json,
            "updated_at": self.updated_at,
        }

    def snapshot(self, last_decision: Decision | None = None) -> LoopSnapshot:
        return LoopSnapshot(
            id=self.id,
            task_id=self.task_id,
            state=self.state,
            iteration=self.iteration,
            max_iterations=self.config.max_iterations,
            config=self.config,
            prompt=self.prompt,
            current_prompt=self.current_prompt,
            context=dict(self.context),
            consecutive_failures=self.consecutive_failures,
            scores=self.scores,
            terminal_reason=self.terminal_reason,
            reason=self.reason,
            seq=self.seq,
            created_at=self.created_at,
            updated_at=self.updated_at,
            parent_id=self.parent_id,
            last_decision=last_decision,
            metadata=dict(self.meta),
        )


def _state(value: str, where: str) -> State:
    try:
        return State.parse(value)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"{where}: {exc}") from None


def _hook_context(
    loop: _Loop,
    submission: Submission,
    report: ValidationReport,
    promises: tuple[Promise, ...],
    phase: State,
) -> HookContext:
    """What a stop hook sees of one iteration."""
    return HookContext(
        task_id=loop.task_id,
        loop_id=loop.id,
        iteration=submission.iteration,
        phase=phase.value,
        agent_output=submission.output,
        files_modified=submission.files_modified,
        validation_results=report.results,
        promises=promises,
        draft_content=submission.draft,
        draft_type=submission.draft_type,
        max_iterations=loop.config.max_iterations,
        context=loop.context,
    )


class _Fenced(Exception):
    """Raised inside a write transaction whose fenced UPDATE matched no row."""


def _check_json(field: str, value: Any) -> None:
    try:
        _dumps(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(field, f"must be JSON-serialisable: {exc}") from None


def _check_text(field: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise ConfigError(field, f"must be a string, got {type(value).__name__}")


class LoopEngine:
    """Durable loops over one database (SQLite by default; any URL, or a file path).

    Every public method is safe to call from several threads. A method that writes takes the
    loop's lease for its duration unless :meth:`hold` keeps it across calls.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        owner: str | None = None,
        lease_ttl: float = 60.0,
        max_output_chars: int = 1_000_000,
        create: bool = True,
        logger: Any = None,
        stop_checkers: Sequence[StopChecker] = (),
    ) -> None:
        if lease_ttl <= 0:
            raise ConfigError("lease_ttl", f"must be > 0 seconds, got {lease_ttl}")
        if max_output_chars < 1000:
            raise ConfigError("max_output_chars", f"must be >= 1000, got {max_output_chars}")
        self.db = Database(url, create=create)
        self.url = self.db.url
        self.owner = owner or f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lease_ttl = float(lease_ttl)
        self.max_output_chars = max_output_chars
        self._logger = logger
        self.stop_checkers: builtins.list[StopChecker] = builtins.list(stop_checkers)
        self.hooks = HookRegistry(self.db)
        self._lock = threading.RLock()
        self._held: dict[str, _Loop] = {}
        self._pinned: dict[str, int] = {}

    @property
    def _log(self) -> Any:
        # Resolved per event so configuring logging after creating the engine still applies.
        return self._logger if self._logger is not None else get_logger()

    # ----- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Release every lease this engine holds and close the database."""
        with self._lock:
            for loop_id in list(self._held):
                with contextlib.suppress(Exception):
                    self._release(loop_id)
            self._pinned.clear()
            self.db.close()

    def __enter__(self) -> LoopEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- leases ----------------------------------------------------------------------------

    def _load(self, loop_id: str) -> tuple[_Loop, Mapping[str, Any]]:
        if not isinstance(loop_id, str) or not loop_id:
            raise ConfigError("loop_id", f"must be a non-empty string, got {loop_id!r}")
        row = self.db.fetch_one("select_loop", {"id": loop_id})
        if row is None:
            raise LoopNotFoundError(loop_id)
        return _Loop.from_row(row), row

    def _acquire(self, loop_id: str, *, force: bool = False) -> _Loop:
        loop, row = self._load(loop_id)
        now = time.time()
        holder = row["lease_owner"]
        if holder and holder != self.owner and not force and row["lease_expires"] > now:
            pid, host = row["lease_pid"], row["lease_host"]
            dead = host == _HOST and pid is not None and pid != os.getpid() and not _pid_alive(pid)
            if not dead:
                raise LeaseHeldError(
                    f"loop {loop_id} is being driven by {holder} (pid {pid} on {host}) for "
                    f"another {row['lease_expires'] - now:.0f}s; wait for it to finish or its "
                    "lease to expire, or block the loop to take it over"
                )
        with self.db.transaction():
            taken = self.db.execute("acquire_lease", self._taking(loop, now))
        if taken != 1:
            raise LeaseHeldError(f"loop {loop_id} was taken by another owner just now; retry")
        loop = replace(loop, epoch=loop.epoch + 1)
        self._held[loop_id] = loop
        return loop

    def _taking(self, loop: _Loop, now: float) -> JSON:
        """The parameters that take a loop's lease at the epoch it was read with."""
        return {
            "id_": loop.id,
            "seen_epoch": loop.epoch,
            "owner": self.owner,
            "expires": now + self.lease_ttl,
            "pid": os.getpid(),
            "host": _HOST,
        }

    def _release(self, loop_id: str) -> None:
        loop = self._held.pop(loop_id, None)
        if loop is None:
            return
        with self.db.transaction():
            self.db.execute(
                "release_lease", {"id_": loop_id, "owner": self.owner, "epoch": loop.epoch}
            )

    @contextlib.contextmanager
    def _owned(self, loop_id: str, *, force: bool = False) -> Iterator[_Loop]:
        with self._lock:
            loop = self._held.get(loop_id)
            if loop is None and loop_id in self._pinned and not force:
                # Held across calls and fenced meanwhile: never take it back silently.
                raise StaleOwnerError(
                    f"loop {loop_id}: this owner ({self.owner}) lost the lease it was holding "
                    "and its writes are rejected; stop driving it"
                )
            if loop is None or force:
                loop = self._acquire(loop_id, force=force)
            try:
                yield loop
            finally:
                if loop_id not in self._pinned:
                    with contextlib.suppress(Exception):
                        self._release(loop_id)

    @contextlib.contextmanager
    def hold(self, loop_id: str) -> Iterator[LoopSnapshot]:
        """Keep the loop's lease across calls (a driver running an agent iteration by iteration).

        Call :meth:`renew` more often than ``lease_ttl`` while holding it for long.
        """
        with self._lock:
            loop = self._held.get(loop_id) or self._acquire(loop_id)
            self._pinned[loop_id] = self._pinned.get(loop_id, 0) + 1
        try:
            yield loop.snapshot()
        finally:
            with self._lock:
                self._pinned[loop_id] -= 1
                if not self._pinned[loop_id]:
                    del self._pinned[loop_id]
                    with contextlib.suppress(Exception):
                        self._release(loop_id)

    def claim(self, marker: str, *, skip: Collection[str] = ()) -> str | None:
        """For workers: take the lease of the oldest runnable loop nobody holds, or None.

        Runnable: ``validating`` or ``deciding`` (engine work), or ``initialized`` /
        ``executing`` with ``marker`` in its metadata (an agent command a worker can run).
        One short transaction (``FOR UPDATE SKIP LOCKED`` on PostgreSQL); when this returns
        an id, the lease is this engine's, as after :meth:`hold`'s acquire. Loops in ``skip``
        and unreadable loops are passed over.
        """
        now = time.time()
        with self._lock, self.db.transaction():
            rows = self.db.fetch_all(
                "claim_loops",
                {"agent_marker": marker, "now": now, "limit": 1 + len(skip), "offset": 0},
            )
            for candidate in rows:
                loop_id = str(candidate["id"])
                row = self.db.fetch_one("select_loop", {"id": loop_id})
                if loop_id in skip or row is None:
                    continue
                try:
                    loop = _Loop.from_row(row)
                except CorruptRecordError as exc:
                    self._log.warning("corrupt_loop_skipped", loop_id=loop_id, error=str(exc))
                    continue
                if self.db.execute("acquire_lease", self._taking(loop, now)) == 1:
                    self._held[loop_id] = replace(loop, epoch=loop.epoch + 1)
                    return loop_id
        return None

    def renew(self, loop_id: str) -> None:
        """Extend a held lease; StaleOwnerError if it was taken over meanwhile.

        Safe to call from a heartbeat thread while another thread is inside ``submit``: it
        does not wait for the engine's lock (a validation command may run for minutes), only
        for the database's, which a transaction holds for microseconds.
        """
        loop = self._held.get(loop_id)
        if loop is None:
            raise StaleOwnerError(f"this engine does not hold loop {loop_id}'s lease")
        with self.db.transaction():
            n = self.db.execute(
                "renew_lease",
                {
                    "id_": loop_id,
                    "owner": self.owner,
                    "epoch": loop.epoch,
                    "expires": time.time() + self.lease_ttl,
                },
            )
        if n != 1:
            self._held.pop(loop_id, None)
            raise StaleOwnerError(
                f"loop {loop_id}: this owner ({self.owner}) lost its lease; stop driving it"
            )

    # ----- the fenced write ------------------------------------------------------------------

    def _commit(
        self,
        loop: _Loop,
        trigger: str,
        data: JSON,
        *,
        iteration_row: JSON | None = None,
        signal: Signal | None = None,
        **changes: Any,
    ) -> _Loop:
        started = time.perf_counter()
        machine_kwargs = changes.pop("machine_kwargs", {})
        dest = machine.step(loop.id, loop.state, trigger, **machine_kwargs)
        now = time.time()
        new = replace(loop, state=dest, seq=loop.seq + 1, updated_at=now, **changes)
        params = self._fenced(loop, new, now)
        checkpoint = self._checkpoint_row(loop.id, new.seq, dest, new.iteration, trigger, data, now)
        try:
            with self.db.transaction():
                if self.db.execute("update_loop", params) != 1:
                    raise _Fenced
                self.db.execute("insert_checkpoint", checkpoint)
                if iteration_row is not None:
                    self.db.execute("insert_iteration", iteration_row)
        except _Fenced:
            self._held.pop(loop.id, None)
            raise self._stale(loop, trigger) from None
        except BaseException:
            self._held.pop(loop.id, None)
            raise
        self._held[loop.id] = new
        self._log_transition(
            loop, new, trigger, signal, new.reason if dest.terminal else data.get("reason"), started
        )
        return new

    def _fenced(self, loop: _Loop, new: _Loop, now: float) -> JSON:
        """The parameters of ``update_loop``: ``new``'s columns, applied only if we still
        hold the lease at our epoch and the row is still at ``loop``'s checkpoint."""
        params = new.columns()
        params.update(
            id_=loop.id,
            owner_=self.owner,
            epoch_=loop.epoch,
            old_seq_=loop.seq,
            lease_expires=now + self.lease_ttl,
        )
        return params

    def _checkpoint_row(
        self,
        loop_id: str,
        seq: int,
        state: State,
        iteration: int,
        trigger: str,
        data: JSON,
        now: float,
    ) -> JSON:
        """One immutable checkpoint row: the entry into ``state``, with its own data only."""
        return {
            "loop_id": loop_id,
            "seq": seq,
            "state": state.value,
            "iteration": iteration,
            "trigger": trigger,
            "schema_version": SCHEMA_VERSION,
            "created_at": now,
            "owner": self.owner,
            "data": _dumps(data),
        }

    def _log_transition(
        self,
        before: _Loop | None,
        after: _Loop,
        trigger: str,
        signal: Signal | None,
        reason: str | None,
        started: float,
    ) -> None:
        self._log.info(
            "transition",
            loop_id=after.id,
            task_id=after.task_id,
            iteration=after.iteration,
            from_state=before.state.value if before else None,
            to_state=after.state.value,
            trigger=trigger,
            signal=signal.value if signal else None,
            reason=reason,
            seq=after.seq,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )

    def _stale(self, loop: _Loop, trigger: str) -> StaleOwnerError:
        row = self.db.fetch_one("select_loop", {"id": loop.id})
        now_held = f"now epoch {row['lease_epoch']} held by {row['lease_owner']}" if row else ""
        return StaleOwnerError(
            f"loop {loop.id}: this owner ({self.owner}, epoch {loop.epoch}) lost its lease "
            f"({now_held}); its {trigger!r} write was rejected and nothing changed"
        )

    # ----- creating loops --------------------------------------------------------------------

    def create(
        self,
        task_id: str,
        config: LoopConfig | None = None,
        *,
        prompt: str = "",
        context: Mapping[str, Any] | None = None,
        parent_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        loop_id: str | None = None,
    ) -> LoopSnapshot:
        """Create a loop in ``initialized`` (nothing runs until it is started or resumed)."""
        with self._lock:
            loop = self._create(task_id, config, prompt, context, parent_id, metadata, loop_id)
            self._release(loop.id)
            return loop.snapshot()

    def start(
        self,
        task_id: str,
        config: LoopConfig | None = None,
        *,
        prompt: str = "",
        context: Mapping[str, Any] | None = None,
        parent_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        loop_id: str | None = None,
    ) -> LoopSnapshot:
        """Create a loop and start it: it is ``executing`` iteration 1 when this returns."""
        with self._lock:
            loop = self._create(task_id, config, prompt, context, parent_id, metadata, loop_id)
            try:
                loop = self._start(loop)
            finally:
                if loop.id not in self._pinned:
                    self._release(loop.id)
            return loop.snapshot()

    def _create(
        self,
        task_id: str,
        config: LoopConfig | None,
        prompt: str,
        context: Mapping[str, Any] | None,
        parent_id: str | None,
        metadata: Mapping[str, Any] | None,
        loop_id: str | None,
    ) -> _Loop:
        if not isinstance(task_id, str) or not task_id.strip() or len(task_id) > 200:
            raise ConfigError(
                "task_id", f"must be a non-empty string of <= 200 chars, got {task_id!r}"
            )
        config = config if config is not None else LoopConfig()
        if not isinstance(config, LoopConfig):
            raise ConfigError("config", f"must be a LoopConfig, got {type(config).__name__}")
        if config.workdir is None:
            config = config.with_changes(workdir=os.getcwd())
        _check_text("prompt", prompt)
        ctx = dict(context or {})
        meta = dict(metadata or {})
        _check_json("context", ctx)
        _check_json("metadata", meta)
        loop_id = loop_id or uuid.uuid4().hex
        if not isinstance(loop_id, str) or not 1 <= len(loop_id) <= 64 or not loop_id.isprintable():
            raise ConfigError("loop_id", f"must be 1-64 printable characters, got {loop_id!r}")
        started = time.perf_counter()
        now = time.time()
        config_json = _dumps(config.to_dict())
        loop = _Loop(
            id=loop_id,
            task_id=task_id,
            parent_id=parent_id,
            state=State.INITIALIZED,
            iteration=0,
            last_decided=0,
            seq=1,
            config=config,
            config_json=config_json,
            prompt=prompt,
            current_prompt=prompt,
            context=ctx,
            context_json=_dumps(ctx),
            consecutive_failures=0,
            stop_retries=0,
            scores=(),
            terminal_reason=None,
            reason="",
            meta=meta,
            meta_json=_dumps(meta),
            created_at=now,
            updated_at=now,
            epoch=1,
        )
        row = loop.columns()
        row.update(
            id=loop_id,
            task_id=task_id,
            parent_id=parent_id,
            prompt=prompt,
            created_at=now,
            lease_owner=self.owner,
            lease_epoch=1,
            lease_expires=now + self.lease_ttl,
            lease_pid=os.getpid(),
            lease_host=_HOST,
        )
        data = {"config": config.to_dict(), "prompt": prompt, "context": ctx, "metadata": meta}
        checkpoint = self._checkpoint_row(loop_id, 1, State.INITIALIZED, 0, "create", data, now)
        with self.db.transaction():
            if self.db.fetch_one("select_loop", {"id": loop_id}) is not None:
                raise ConfigError("loop_id", f"a loop with id {loop_id!r} already exists")
            self.db.execute("insert_loop", row)
            self.db.execute("insert_checkpoint", checkpoint)
        self._held[loop_id] = loop
        self._log_transition(None, loop, "create", None, None, started)
        return loop

    def _start(self, loop: _Loop) -> _Loop:
        return self._commit(
            loop,
            "start",
            {"iteration": 1, "prompt": loop.prompt, "context": loop.context},
            iteration=1,
            current_prompt=loop.prompt,
        )

    # ----- one iteration ---------------------------------------------------------------------

    def submit(
        self,
        loop_id: str,
        output: str,
        *,
        files_modified: Sequence[str] = (),
        draft: str | None = None,
        draft_type: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> Decision:
        """Hand in the agent's output for the current iteration; validate, decide, persist."""
        _check_text("output", output)
        _check_text("draft", draft, optional=True)
        _check_text("draft_type", draft_type, optional=True)
        if isinstance(files_modified, str) or not all(isinstance(f, str) for f in files_modified):
            raise ConfigError("files_modified", "must be a list of file paths")
        update = dict(context or {})
        _check_json("context", update)
        with self._owned(loop_id) as loop:
            if loop.state is not State.EXECUTING:
                hint = ""
                if loop.state in (State.VALIDATING, State.DECIDING):
                    hint = (
                        f"iteration {loop.iteration}'s output is already in; call resume() to "
                        "finish it first"
                    )
                elif loop.state is State.INITIALIZED:
                    hint = "call resume() to start it first"
                raise InvalidTransitionError(
                    loop.id, loop.state.value, "submit", hint or machine._hint(loop.state, "submit")
                )
            self._require_resolvable(loop)
            stored = self._bound_output(output)
            context = {**loop.context, **update}
            loop = self._commit(
                loop,
                "submit",
                {
                    "output": stored,
                    "files_modified": list(files_modified),
                    "draft": draft,
                    "draft_type": draft_type,
                    "context_update": update,
                },
                context=context,
                context_json=_dumps(context),
            )
            return self._validate(loop)

    def _bound_output(self, output: str) -> str:
        limit = self.max_output_chars
        if len(output) <= limit:
            return output
        half = limit // 2
        dropped = len(output) - 2 * half
        marker = f"\n[... {dropped} characters dropped by loopwarden ...]\n"
        return output[:half] + marker + output[-half:]

    def _require_resolvable(self, loop: _Loop) -> None:
        self.hooks.resolved(loop.task_id)  # raises, naming the first missing hook
        missing = [r.name for r in loop.config.rules if not r.resolvable]
        if missing:
            names = ", ".join(repr(n) for n in missing)
            raise UnresolvedReferenceError(
                f"loop {loop.id} uses predicate rule(s) {names} that are not registered in this "
                f"process; call loopwarden.rules.predicate(name, fn) for each before resuming"
            )

    def _validate(self, loop: _Loop) -> Decision:
        """From ``validating``: evaluate the stored output, enter ``deciding``, then decide."""
        data = self._checkpoint_data(loop.id, loop.seq)
        submission = Submission(
            output=data["output"],
            draft=data.get("draft"),
            draft_type=data.get("draft_type"),
            files_modified=tuple(data.get("files_modified", ())),
            context=loop.context,
            iteration=loop.iteration,
            workdir=loop.config.workdir,
            loop_id=loop.id,
            task_id=loop.task_id,
        )
        report = evaluate_all(loop.config.rules, submission)
        promises = tuple(detect_promises(submission.output, loop.config.promise_words))
        failures, scores = next_counters(
            loop.consecutive_failures, loop.scores, report, loop.config.regression_window
        )
        hook, hook_records = self._hook_verdict(loop, submission, report, promises)
        evidence = Evidence(
            iteration=loop.iteration,
            max_iterations=loop.config.max_iterations,
            report=report,
            promises=promises,
            consecutive_failures=failures,
            scores=scores,
            hook=hook,
        )
        evidence = replace(evidence, stop_checks=self._stop_checks(loop, evidence, submission))
        loop = self._commit(
            loop, "evaluate", {"evidence": evidence.to_dict(), "hooks": hook_records}
        )
        return self._decide(loop, evidence)

    def _hook_verdict(
        self,
        loop: _Loop,
        submission: Submission,
        report: ValidationReport,
        promises: tuple[Promise, ...],
    ) -> tuple[HookVerdict | None, builtins.list[JSON]]:
        """The task's stop hooks' combined verdict and each hook's record (no hooks: None)."""
        hooks, _validators = self.hooks.resolved(loop.task_id)
        if not any(enabled for *_rest, enabled in hooks):
            return None, []
        context = _hook_context(loop, submission, report, promises, State.VALIDATING)
        evaluation = evaluate_hooks(hooks, context)
        result = evaluation.result
        names = {hook_id: name for hook_id, name, _hook, _enabled in hooks}
        source = "hooks"
        if evaluation.hook_id:
            source = f"{names.get(evaluation.hook_id, 'hook')} ({evaluation.hook_id})"
        verdict = HookVerdict(
            result.action,
            result.reason,
            result.next_prompt,
            source,
            dict(result.checkpoint_data) if result.checkpoint_data else None,
        )
        return verdict, [r.to_dict() for r in evaluation.records]

    def evaluate_hooks(
        self,
        loop_id: str,
        output: str | None = None,
        *,
        files_modified: Sequence[str] = (),
        draft: str | None = None,
        draft_type: str | None = None,
    ) -> HookEvaluation:
        """Evaluate the task's hooks for the loop's current iteration, changing nothing.

        With ``output`` the rules run on it; without, the iteration's stored output is used
        (the current one when it was submitted, else the last decided one).
        """
        loop, _row = self._load(loop_id)
        self._require_resolvable(loop)
        if output is None:
            stored = self._latest_output(loop)
            output = stored.get("output", "")
            files_modified = stored.get("files_modified", ())
            draft = stored.get("draft")
            draft_type = stored.get("draft_type")
        _check_text("output", output)
        submission = Submission(
            output=output,
            draft=draft,
            draft_type=draft_type,
            files_modified=tuple(files_modified),
            context=loop.context,
            iteration=max(loop.iteration, 1),
            workdir=loop.config.workdir,
            loop_id=loop.id,
            task_id=loop.task_id,
        )
        report = evaluate_all(loop.config.rules, submission)
        hooks, _validators = self.hooks.resolved(loop.task_id)
        promises = tuple(detect_promises(output, loop.config.promise_words))
        return evaluate_hooks(hooks, _hook_context(loop, submission, report, promises, loop.state))

    def _latest_output(self, loop: _Loop) -> JSON:
        """The data of the latest ``validating`` checkpoint (empty when none yet)."""
        if loop.state in (State.VALIDATING, State.DECIDING):
            seq = loop.seq if loop.state is State.VALIDATING else loop.seq - 1
            return self._checkpoint_data(loop.id, seq)
        if loop.last_decided:
            row = self.db.fetch_one(
                "last_iteration", {"loop_id": loop.id, "iteration": loop.last_decided}
            )
            if row is not None:
                return self._checkpoint_data(loop.id, int(row["validating_seq"]))
        return {}

    def _stop_checkers(self, loop: _Loop) -> builtins.list[StopChecker]:
        """The checkers consulted for this loop: the engine's own, then the task's validators."""
        checkers: builtins.list[StopChecker] = builtins.list(self.stop_checkers)
        _hooks, validators = self.hooks.resolved(loop.task_id)
        if validators:
            checkers.append(ValidatorChecker(validators))
        return checkers

    def _stop_checks(
        self, loop: _Loop, evidence: Evidence, submission: Submission
    ) -> tuple[StopCheck, ...]:
        """Ask the stop checks when the loop is about to complete; their answers are evidence."""
        checkers = self._stop_checkers(loop)
        if not checkers:
            return ()
        about_to = decide(evidence, loop.config)
        if about_to.signal is not Signal.COMPLETE:
            return ()
        limit = loop.config.max_stop_retries
        if loop.stop_retries >= limit:
            return (
                StopCheck(
                    "loopwarden",
                    True,
                    f"stop allowed after {loop.stop_retries} vetoes in a row "
                    f"(max_stop_retries={limit})",
                    forced=True,
                ),
            )
        context = StopContext(
            loop_id=loop.id,
            task_id=loop.task_id,
            iteration=evidence.iteration,
            max_iterations=evidence.max_iterations,
            output=submission.output,
            stop_reason=about_to.reason,
            retry_count=loop.stop_retries,
            report=evidence.report,
            prompt=loop.current_prompt,
            promises=evidence.promises,
            files_modified=submission.files_modified,
            parent_id=loop.parent_id,
            workdir=loop.config.workdir,
            context=loop.context,
            metadata=loop.meta,
        )
        answers: builtins.list[StopCheck] = []
        for checker in checkers:
            name = getattr(checker, "name", type(checker).__name__)
            try:
                answer = checker.check(context)
            except Exception as exc:
                self._log.warning("stop_check_failed", loop_id=loop.id, check=name, error=str(exc))
                answer = StopCheck(
                    name, True, f"check raised {type(exc).__name__}: {exc}; stop allowed", True
                )
            if answer is not None:
                answers.append(answer)
        return tuple(answers)

    def _decide(self, loop: _Loop, evidence: Evidence) -> Decision:
        """From ``deciding``: apply the decision the stored evidence implies."""
        decision = decide(evidence, loop.config)
        iteration_row = {
            "loop_id": loop.id,
            "iteration": evidence.iteration,
            # executing → validating → deciding is the only path into deciding, so the
            # iteration's three checkpoints are the last three.
            "executing_seq": loop.seq - 2,
            "validating_seq": loop.seq - 1,
            "deciding_seq": loop.seq,
            "decided_seq": loop.seq + 1,
            "signal": decision.signal.value,
            "score": decision.score,
            "passed": decision.passed,
            "terminal_reason": decision.terminal_reason.value if decision.terminal_reason else None,
            "decision": _dumps(decision.to_dict()),
            "decided_at": time.time(),
        }
        changes: dict[str, Any] = {
            "last_decided": evidence.iteration,
            "consecutive_failures": evidence.consecutive_failures,
            "scores": evidence.scores,
            "stop_retries": self._next_stop_retries(loop, evidence, decision),
        }
        data: JSON = {"decision": decision.to_dict(), "reason": decision.reason}
        extra = evidence.hook.checkpoint_data if evidence.hook else None
        if extra:
            context = {**loop.context, **extra}
            changes.update(context=context, context_json=_dumps(context))
            loop = replace(loop, context=context)
        if decision.signal is Signal.CONTINUE:
            prompt = compose_prompt(loop.prompt, decision)
            changes.update(iteration=evidence.iteration + 1, current_prompt=prompt, reason="")
            data.update(iteration=evidence.iteration + 1, prompt=prompt, context=loop.context)
        else:
            changes.update(terminal_reason=decision.terminal_reason, reason=decision.reason)
        self._commit(
            loop,
            "decide",
            data,
            iteration_row=iteration_row,
            signal=decision.signal,
            machine_kwargs={"decision": decision},
            **changes,
        )
        return decision

    def _next_stop_retries(self, loop: _Loop, evidence: Evidence, decision: Decision) -> int:
        vetoed = decision.signal is Signal.CONTINUE and any(
            not c.allowed for c in evidence.stop_checks
        )
        return loop.stop_retries + 1 if vetoed else 0

    def _checkpoint_data(self, loop_id: str, seq: int) -> JSON:
        row = self.db.fetch_one("select_checkpoint", {"loop_id": loop_id, "seq": seq})
        if row is None:
            raise CorruptRecordError(
                f"loop {loop_id}: checkpoint {seq} is missing; the database was altered by hand"
            )
        data = _loads(row["data"], f"loop {loop_id}: checkpoint {seq}")
        if not isinstance(data, dict):
            raise CorruptRecordError(f"loop {loop_id}: checkpoint {seq} is not a JSON object")
        return data

    # ----- resume and manual control ---------------------------------------------------------

    def resume(self, loop_id: str) -> LoopSnapshot:
        """Re-enter the stored state and finish whatever it left pending.

        ``initialized`` starts the loop; ``executing`` hands back the same prompt (in the
        snapshot's ``current_prompt``); ``validating`` re-runs validation on the stored output
        and decides; ``deciding`` re-applies the decision from the stored evidence; a terminal
        state is returned as is.
        """
        with self._owned(loop_id) as loop:
            if not loop.state.terminal:
                # Fail now, naming what is missing, rather than at the next submit.
                self._require_resolvable(loop)
            if loop.state is State.INITIALIZED:
                loop = self._start(loop)
            elif loop.state is State.VALIDATING:
                self._validate(loop)
            elif loop.state is State.DECIDING:
                data = self._checkpoint_data(loop.id, loop.seq)
                try:
                    evidence = Evidence.from_dict(data["evidence"])
                except (KeyError, TypeError, ValueError) as exc:
                    raise CorruptRecordError(
                        f"loop {loop.id}: checkpoint {loop.seq} has no readable evidence ({exc})"
                    ) from None
                self._decide(loop, evidence)
            return self._snapshot(self._held.get(loop_id) or self._load(loop_id)[0])

    def block(self, loop_id: str, reason: str) -> LoopSnapshot:
        """A human's override: block a live loop now, taking the lease from any driver."""
        _check_text("reason", reason)
        with self._owned(loop_id, force=True) as loop:
            loop = self._commit(
                loop,
                "block",
                {"reason": reason, "by": "user"},
                terminal_reason=TerminalReason.BLOCKED_BY_USER,
                reason=reason or "blocked by the user",
            )
            return self._snapshot(loop)

    def reopen(
        self, loop_id: str, *, extra_iterations: int = 0, note: str | None = None
    ) -> LoopSnapshot:
        """Move a blocked or escalated loop back to executing, optionally with more iterations.

        ``note`` becomes the next iteration's feedback. The breaker and regression window
        start afresh: a human has looked at the loop.
        """
        if isinstance(extra_iterations, bool) or not isinstance(extra_iterations, int):
            raise ConfigError(
                "extra_iterations", f"must be an integer >= 0, got {extra_iterations!r}"
            )
        if extra_iterations < 0:
            raise ConfigError("extra_iterations", f"must be >= 0, got {extra_iterations}")
        _check_text("note", note, optional=True)
        with self._owned(loop_id) as loop:
            next_iteration = loop.last_decided + 1
            config = loop.config
            if extra_iterations:
                config = config.with_changes(
                    max_iterations=config.max_iterations + extra_iterations
                )
            if loop.state in (State.BLOCKED, State.ESCALATED) and (
                next_iteration > config.max_iterations
            ):
                raise InvalidTransitionError(
                    loop.id,
                    loop.state.value,
                    "reopen",
                    f"it has used {loop.last_decided} of {config.max_iterations} iterations; "
                    "reopen with extra_iterations >= 1",
                )
            prompt = compose_prompt(loop.prompt, None, note)
            loop = self._commit(
                loop,
                "reopen",
                {
                    "iteration": next_iteration,
                    "prompt": prompt,
                    "context": loop.context,
                    "note": note,
                    "extra_iterations": extra_iterations,
                    "max_iterations": config.max_iterations,
                },
                machine_kwargs={
                    "next_iteration": next_iteration,
                    "max_iterations": config.max_iterations,
                },
                config=config,
                config_json=_dumps(config.to_dict()),
                iteration=next_iteration,
                current_prompt=prompt,
                terminal_reason=None,
                reason="",
                consecutive_failures=0,
                scores=(),
                stop_retries=0,
            )
            return self._snapshot(loop)

    def _rewrite(
        self, loop: _Loop, new: _Loop, what: str, also: tuple[str, JSON] | None = None
    ) -> tuple[_Loop, int]:
        """Write a changed loop row that enters no state (no checkpoint), fenced like any write.

        ``also`` is one more statement to run in the same transaction; its row count is
        returned with the new loop.
        """
        touched = 0
        params = self._fenced(loop, new, time.time())
        with self.db.transaction():
            if self.db.execute("update_loop", params) != 1:
                self._held.pop(loop.id, None)
                raise self._stale(loop, what)
            if also is not None:
                touched = self.db.execute(*also)
        self._held[loop.id] = new
        return new, touched

    def update_metadata(self, loop_id: str, patch: Mapping[str, Any]) -> LoopSnapshot:
        """Merge ``patch`` into the loop's metadata (a key set to None is removed).

        Metadata is the orchestrator's own record (an agent command, a session binding, which
        completion hooks have fired); it never affects a decision.
        """
        if not isinstance(patch, Mapping):
            raise ConfigError("metadata", f"must be a JSON object, got {type(patch).__name__}")
        _check_json("metadata", dict(patch))
        with self._owned(loop_id) as loop:
            meta = {**loop.meta, **patch}
            meta = {k: v for k, v in meta.items() if v is not None}
            new = replace(loop, meta=meta, meta_json=_dumps(meta), updated_at=loop.updated_at)
            return self._snapshot(self._rewrite(loop, new, "update_metadata")[0])

    def update_context(self, loop_id: str, update: Mapping[str, Any]) -> LoopSnapshot:
        """Merge ``update`` into a live loop's agent context between submits."""
        if not isinstance(update, Mapping):
            raise ConfigError("context", f"must be a JSON object, got {type(update).__name__}")
        _check_json("context", dict(update))
        with self._owned(loop_id) as loop:
            if loop.state.terminal:
                raise InvalidTransitionError(
                    loop.id, loop.state.value, "update_context", "the loop has finished"
                )
            context = {**loop.context, **update}
            new = replace(loop, context=context, context_json=_dumps(context))
            return self._snapshot(self._rewrite(loop, new, "update_context")[0])

    def scores(self, loop_id: str) -> builtins.list[float]:
        """Every decided iteration's score, in order (cheap: no outputs are read)."""
        self._load(loop_id)
        rows = self.db.fetch_all("loop_iterations", {"loop_id": loop_id})
        return [float(r["score"]) for r in rows]

    def set_max_iterations(self, loop_id: str, max_iterations: int) -> LoopSnapshot:
        """Change a live loop's iteration budget (not below the iteration it is in)."""
        with self._owned(loop_id) as loop:
            if loop.state.terminal:
                raise InvalidTransitionError(
                    loop.id,
                    loop.state.value,
                    "set_max_iterations",
                    "reopen it with extra_iterations",
                )
            floor = max(loop.iteration, 1)
            valid_int = isinstance(max_iterations, int) and not isinstance(max_iterations, bool)
            if valid_int and max_iterations < floor:
                raise ConfigError(
                    "max_iterations",
                    f"must be >= the current iteration {floor} of loop {loop_id}, "
                    f"got {max_iterations}",
                )
            config = loop.config.with_changes(max_iterations=max_iterations)
            new = replace(loop, config=config, config_json=_dumps(config.to_dict()))
            return self._snapshot(self._rewrite(loop, new, "set_max_iterations")[0])

    # ----- reading ---------------------------------------------------------------------------

    def _snapshot(self, loop: _Loop) -> LoopSnapshot:
        last = None
        if loop.last_decided:
            row = self.db.fetch_one(
                "last_iteration", {"loop_id": loop.id, "iteration": loop.last_decided}
            )
            if row is not None:
                last = Decision.from_dict(
                    _loads(row["decision"], f"loop {loop.id}: iteration {loop.last_decided}")
                )
        return loop.snapshot(last)

    def get(self, loop_id: str) -> LoopSnapshot:
        """The loop as stored now."""
        return self._snapshot(self._load(loop_id)[0])

    def list(
        self, state: State | str | None = None, task_id: str | None = None, limit: int | None = None
    ) -> builtins.list[LoopSnapshot]:
        """Loops, oldest first, optionally of one state and/or task (unreadable rows skipped)."""
        state_value = State.parse(state).value if state is not None else None
        rows = self.db.fetch_all(
            "list_loops",
            {"state": state_value, "task_id": task_id, "limit": limit or NO_LIMIT, "offset": 0},
        )
        found = []
        for row in rows:
            try:
                found.append(_Loop.from_row(row).snapshot())
            except CorruptRecordError as exc:
                # One damaged loop must not hide the others; get(loop_id) still raises for it.
                self._log.warning("corrupt_loop_skipped", loop_id=row["id"], error=str(exc))
        return found

    def _history_rows(self, loop_id: str) -> Iterator[tuple[Mapping[str, Any], JSON, JSON, JSON]]:
        """Each decided iteration's row with its executing, validating and deciding data.

        After ``prune`` the checkpoints are gone and their data comes back empty.
        """
        self._load(loop_id)
        rows = self.db.fetch_all(
            "history", {"loop_id": loop_id, "first": 0, "limit": NO_LIMIT, "offset": 0}
        )
        for row in rows:
            where = f"loop {loop_id}: iteration {row['iteration']}"
            parts = [
                _loads(row[key], where) if row[key] is not None else {}
                for key in ("executing_data", "validating_data", "deciding_data")
            ]
            yield row, parts[0], parts[1], parts[2]

    def history(self, loop_id: str) -> builtins.list[IterationRecord]:
        """Every decided iteration: prompt, output, report, promises, decision and times."""
        records = []
        for row, executing, validating, deciding in self._history_rows(loop_id):
            where = f"loop {loop_id}: iteration {row['iteration']}"
            decision = Decision.from_dict(_loads(row["decision"], where))
            evidence = (
                Evidence.from_dict(deciding["evidence"])
                if "evidence" in deciding
                else Evidence(decision.iteration, 0)
            )
            records.append(
                IterationRecord(
                    loop_id=loop_id,
                    iteration=int(row["iteration"]),
                    prompt=executing.get("prompt", ""),
                    output=validating.get("output", ""),
                    files_modified=tuple(validating.get("files_modified", ())),
                    draft=validating.get("draft"),
                    report=evidence.report,
                    promises=evidence.promises,
                    decision=decision,
                    started_at=float(row["started_at"] or row["decided_at"]),
                    submitted_at=float(row["submitted_at"] or row["decided_at"]),
                    decided_at=float(row["decided_at"]),
                    hooks=tuple(deciding.get("hooks", ())),
                )
            )
        return records

    # ----- the guard laboratory: replay, fork, prune -----------------------------------------

    def replay(
        self, loop_id: str, config_overrides: Mapping[str, Any] | None = None, **overrides: Any
    ) -> ReplayResult:
        """Re-decide a recorded loop's iterations under other guard settings (nothing runs).

        ``engine.replay(loop_id, {"circuit_breaker_threshold": 5})`` returns each recorded
        decision beside the one the new settings give, and ``summary()`` says where the
        outcome would have differed. Promises are detected again in the stored outputs, so
        changed promise words take effect too.
        """
        loop = self._load(loop_id)[0]
        changes = {**(config_overrides or {}), **overrides}
        new_words = override_config(loop.config, changes).promise_words
        recorded: builtins.list[tuple[Evidence, Decision]] = []
        for row, _executing, validating, deciding in self._history_rows(loop_id):
            if "evidence" not in deciding:
                raise StoreError(
                    f"loop {loop_id}: iteration {row['iteration']} was pruned; its evidence "
                    "is gone and it cannot be replayed"
                )
            evidence = Evidence.from_dict(deciding["evidence"])
            if "output" in validating:
                found = detect_promises(validating["output"], new_words)
                evidence = replace(evidence, promises=tuple(found))
            decision = Decision.from_dict(_loads(row["decision"], f"loop {loop_id}"))
            recorded.append((evidence, decision))
        return replay_decisions(loop_id, loop.config, changes, recorded)

    def fork(
        self,
        loop_id: str,
        seq: int | None = None,
        *,
        prompt: str | None = None,
        config: LoopConfig | None = None,
        note: str | None = None,
    ) -> LoopSnapshot:
        """A new loop that starts from checkpoint ``seq`` of ``loop_id`` (default: the latest).

        The new loop has the original's checkpoints and decided iterations up to that point,
        enters the checkpoint's state, and records its parent loop and checkpoint in its
        metadata and in its first new checkpoint. ``prompt`` replaces the base prompt (and the
        current one when forking from ``executing``); ``config`` replaces the configuration.
        The original is not touched.
        """
        _check_text("prompt", prompt, optional=True)
        _check_text("note", note, optional=True)
        with self._lock:
            parent = self._load(loop_id)[0]
            cps = self.db.fetch_all("list_checkpoints", {"loop_id": loop_id})
            seq = parent.seq if seq is None else seq
            by_seq = {int(r["seq"]): r for r in cps}
            if seq not in by_seq:
                have = f"{min(by_seq)}..{max(by_seq)}" if by_seq else "none"
                raise ConfigError(
                    "seq", f"loop {loop_id} has no checkpoint {seq} (it has {have}; pruned?)"
                )
            if any(s not in by_seq for s in range(1, seq)):
                raise ConfigError("seq", f"loop {loop_id} was pruned below checkpoint {seq}")
            target = self._checkpoint(by_seq[seq])
            iterations = [
                r
                for r in self.db.fetch_all("loop_iterations", {"loop_id": loop_id})
                if int(r["decided_seq"]) <= seq
            ]
            state = target.state
            context: JSON = {}
            current_prompt = parent.prompt
            for s in range(1, seq + 1):
                data = self._checkpoint(by_seq[s]).data
                if "context" in data and isinstance(data["context"], dict):
                    context = dict(data["context"])
                if isinstance(data.get("context_update"), dict):
                    context.update(data["context_update"])
                if "prompt" in data and by_seq[s]["state"] == State.EXECUTING.value:
                    current_prompt = str(data["prompt"])
            last_decision: Decision | None = None
            failures: int = 0
            scores: tuple[float, ...] = ()
            if iterations:
                last_decision = Decision.from_dict(_loads(iterations[-1]["decision"], loop_id))
                last_evidence = self._checkpoint(by_seq[int(iterations[-1]["deciding_seq"])])
                ev = Evidence.from_dict(last_evidence.data["evidence"])
                failures, scores = ev.consecutive_failures, ev.scores
            base_prompt = parent.prompt if prompt is None else prompt
            if prompt is not None and state is State.EXECUTING:
                current_prompt = compose_prompt(prompt, last_decision, note)
            elif note and state is State.EXECUTING:
                current_prompt = compose_prompt(current_prompt, None, note)
            new_config = config if config is not None else parent.config
            if not isinstance(new_config, LoopConfig):
                raise ConfigError("config", "must be a LoopConfig")
            if new_config.workdir is None:
                new_config = new_config.with_changes(workdir=parent.config.workdir)
            terminal_reason, reason = None, ""
            if state.terminal:
                decided = target.data.get("decision")
                if isinstance(decided, dict) and decided.get("terminal_reason"):
                    terminal_reason = TerminalReason(decided["terminal_reason"])
                    reason = str(decided.get("reason", ""))
                else:
                    terminal_reason = TerminalReason.BLOCKED_BY_USER
                    reason = str(target.data.get("reason", ""))
            new_id = uuid.uuid4().hex
            now = time.time()
            fork_info = {"parent_loop_id": loop_id, "parent_seq": seq}
            meta = {**parent.meta, "fork": fork_info}
            row = {
                "id": new_id,
                "task_id": parent.task_id,
                "parent_id": parent.parent_id,
                "state": state.value,
                "iteration": target.iteration,
                "last_decided": int(iterations[-1]["iteration"]) if iterations else 0,
                "max_iterations": new_config.max_iterations,
                "seq": seq,
                "config": _dumps(new_config.to_dict()),
                "prompt": base_prompt,
                "current_prompt": current_prompt,
                "context": _dumps(context),
                "consecutive_failures": failures,
                "stop_retries": 0,
                "scores": _dumps(scores),
                "terminal_reason": terminal_reason.value if terminal_reason else None,
                "reason": reason,
                "meta": _dumps(meta),
                "created_at": now,
                "updated_at": now,
                "lease_owner": None,
                "lease_epoch": 0,
                "lease_expires": 0.0,
                "lease_pid": None,
                "lease_host": None,
            }
            copied = [{**r, "loop_id": new_id} for s, r in sorted(by_seq.items()) if s < seq]
            fork_data = {**target.data, "fork": fork_info}
            if state is State.EXECUTING:
                fork_data.update(prompt=current_prompt, context=context)
            if note:
                fork_data["note"] = note
            fork_point = self._checkpoint_row(
                new_id, seq, state, target.iteration, "fork", fork_data, now
            )
            with self.db.transaction():
                self.db.execute("insert_loop", row)
                self.db.execute_many("insert_checkpoint", copied)
                self.db.execute("insert_checkpoint", fork_point)
                self.db.execute_many(
                    "insert_iteration", [{**r, "loop_id": new_id} for r in iterations]
                )
            self._log.info(
                "fork", loop_id=new_id, parent_loop_id=loop_id, parent_seq=seq, state=state.value
            )
            return self.get(new_id)

    def rewind(
        self, loop_id: str, seq: int, *, prompt: str | None = None, note: str | None = None
    ) -> LoopSnapshot:
        """Fork from checkpoint ``seq`` and block the original if it is still live.

        The original is kept (blocked by the user, its reason naming the new loop), so only
        one of the two is driven on.
        """
        fork = self.fork(loop_id, seq, prompt=prompt, note=note)
        if not self.get(loop_id).terminal:
            self.block(loop_id, f"rewound to checkpoint {seq} as loop {fork.id}")
        return fork

    def prune(self, older_than: float, *, now: float | None = None) -> JSON:
        """Delete old checkpoints of finished loops, keeping each loop's outcome and history.

        For every completed, blocked or escalated loop last changed more than ``older_than``
        seconds ago, every checkpoint but the last is deleted (outputs and evidence go with
        them); iteration summaries (signal, score, reason) and the outcome stay. Returns the
        pruned loop ids and how many checkpoints were deleted.
        """
        if isinstance(older_than, bool) or not isinstance(older_than, int | float):
            raise ConfigError("older_than", f"must be a number of seconds, got {older_than!r}")
        if older_than < 0:
            raise ConfigError("older_than", f"must be >= 0 seconds, got {older_than}")
        cutoff = (time.time() if now is None else now) - older_than
        pruned: builtins.list[str] = []
        deleted = 0
        for candidate in self.db.fetch_all("prunable_loops", {"cutoff": cutoff}):
            with self._owned(candidate["id"]) as loop:
                if not loop.state.terminal:
                    continue
                meta = {**loop.meta, "pruned_at": time.time()}
                # updated_at is kept: pruning is not activity.
                new = replace(loop, meta=meta, meta_json=_dumps(meta))
                delete = ("delete_checkpoints_below", {"loop_id": loop.id, "below": loop.seq})
                deleted += self._rewrite(loop, new, "prune", also=delete)[1]
                pruned.append(loop.id)
        self._log.info("prune", loops=len(pruned), checkpoints_deleted=deleted)
        return {"loops": pruned, "checkpoints_deleted": deleted, "cutoff": cutoff}

    def checkpoints(self, loop_id: str) -> builtins.list[CheckpointInfo]:
        """Every checkpoint of a loop, in order: one per state entered."""
        self._load(loop_id)
        rows = self.db.fetch_all("list_checkpoints", {"loop_id": loop_id})
        return [self._checkpoint(r) for r in rows]

    def checkpoint(self, loop_id: str, seq: int) -> CheckpointInfo:
        """One checkpoint of a loop."""
        row = self.db.fetch_one("select_checkpoint", {"loop_id": loop_id, "seq": seq})
        if row is None:
            self._load(loop_id)
            raise LookupError(f"loop {loop_id} has no checkpoint {seq}")
        return self._checkpoint(row)

    def _checkpoint(self, row: Mapping[str, Any]) -> CheckpointInfo:
        where = f"loop {row['loop_id']}: checkpoint {row['seq']}"
        return CheckpointInfo(
            loop_id=row["loop_id"],
            seq=int(row["seq"]),
            state=State.parse(row["state"]),
            iteration=int(row["iteration"]),
            trigger=row["trigger"],
            created_at=float(row["created_at"]),
            schema_version=int(row["schema_version"]),
            data=_loads(row["data"], where),
        )
