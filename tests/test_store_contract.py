"""The store contract: the engine behaves the same on every backend (SQLite and PostgreSQL).

Every test here runs once per backend; a behaviour that holds on one and not the other is a
bug in the store, not in the test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from _driver import leave_in
from loopwarden import (
    CorruptRecordError,
    InvalidTransitionError,
    LeaseHeldError,
    LoopConfig,
    LoopEngine,
    LoopNotFoundError,
    SchemaVersionError,
    Signal,
    StaleOwnerError,
    State,
    TerminalReason,
    rules,
)
from loopwarden.store import SCHEMA_VERSION

pytest_plugins = ["postgres_fixture"]

OK_RULE = rules.pattern("says-ok", r"\bOK\b")
DONE = "OK <promise>COMPLETE</promise> all done"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'contract.db'}"
    url: str = request.getfixturevalue("fresh_pg_url")
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[LoopEngine]:
    """An engine on a fresh database of the backend under test."""
    engine = LoopEngine(store_url)
    yield engine
    engine.close()


def sql(url: str, statement: str, **params: object) -> list[tuple[object, ...]]:
    """Run one raw statement outside loopwarden (to inspect or damage the database)."""
    eng = create_engine(url)
    try:
        with eng.begin() as conn:
            result = conn.execute(text(statement), params)
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        eng.dispose()


def config(**changes: object) -> LoopConfig:
    changes.setdefault("rules", [OK_RULE])
    return LoopConfig(**changes)  # type: ignore[arg-type]


class TestLifecycle:
    """Start, submit, resume and complete."""

    def test_start_enters_executing_iteration_one(self, store: LoopEngine) -> None:
        """A started loop is executing iteration 1 with the prompt it was given."""
        loop = store.start("T-1", config(), prompt="do it", context={"k": [1, 2]})
        got = store.get(loop.id)
        assert (got.state, got.iteration, got.current_prompt) == (State.EXECUTING, 1, "do it")
        assert got.context == {"k": [1, 2]}

    def test_a_failing_then_passing_iteration_completes(self, store: LoopEngine) -> None:
        """A failed rule continues with feedback; a verified promise completes."""
        loop = store.start("T-1", config(max_iterations=5), prompt="p")
        first = store.submit(loop.id, "not yet")
        assert (first.signal, first.state, first.iteration) == (Signal.CONTINUE, State.EXECUTING, 1)
        assert "says-ok" in store.get(loop.id).current_prompt
        second = store.submit(loop.id, DONE, files_modified=["a.py"], context={"x": 1})
        assert (second.signal, second.state) == (Signal.COMPLETE, State.COMPLETED)
        assert second.terminal_reason is TerminalReason.COMPLETED
        final = store.get(loop.id)
        assert final.context == {"x": 1}
        assert final.last_decision is not None
        assert final.last_decision.iteration == 2

    def test_create_then_resume_starts_it(self, store: LoopEngine) -> None:
        """A created loop waits in initialized until resumed."""
        loop = store.create("T-1", config(), prompt="p")
        assert store.get(loop.id).state is State.INITIALIZED
        assert store.resume(loop.id).state is State.EXECUTING

    def test_max_iterations_escalates(self, store: LoopEngine) -> None:
        """The iteration budget stops the loop with its typed reason."""
        loop = store.start("T-1", config(max_iterations=2, circuit_breaker_threshold=5))
        store.submit(loop.id, "no")
        last = store.submit(loop.id, "no")
        assert (last.state, last.terminal_reason) == (
            State.ESCALATED,
            TerminalReason.MAX_ITERATIONS,
        )

    def test_block_and_reopen(self, store: LoopEngine) -> None:
        """A blocked loop reopens with more iterations and the note as feedback."""
        loop = store.start("T-1", config(max_iterations=1))
        assert store.block(loop.id, "wait").state is State.BLOCKED
        again = store.reopen(loop.id, extra_iterations=2, note="try harder")
        assert (again.state, again.max_iterations) == (State.EXECUTING, 3)
        assert "try harder" in again.current_prompt

    @pytest.mark.parametrize("state", ["validating", "deciding"])
    def test_resume_finishes_a_crashed_iteration(self, store_url: str, state: str) -> None:
        """A loop left validating or deciding by a crash finishes that iteration on resume."""
        engine = LoopEngine(store_url)
        try:
            loop = engine.start("T-1", config(), prompt="p")
            leave_in(store_url, loop.id, state, DONE)
            assert engine.get(loop.id).state.value == state
            after = engine.resume(loop.id)
            assert (after.state, after.iteration) == (State.COMPLETED, 1)
            assert [c.state.value for c in engine.checkpoints(loop.id)].count(state) == 1
        finally:
            engine.close()

    def test_unknown_loop(self, store: LoopEngine) -> None:
        """An unknown id is LoopNotFoundError on every read and write."""
        with pytest.raises(LoopNotFoundError):
            store.get("nope")
        with pytest.raises(LoopNotFoundError):
            store.submit("nope", "x")


class TestCheckpoints:
    """One immutable checkpoint per state entry, numbered without gaps."""

    def test_checkpoints_are_contiguous_and_in_machine_order(self, store: LoopEngine) -> None:
        """Two iterations write initialized, then executing/validating/deciding per iteration."""
        loop = store.start("T-1", config(), prompt="p")
        store.submit(loop.id, "no")
        store.submit(loop.id, DONE)
        cps = store.checkpoints(loop.id)
        assert [c.seq for c in cps] == list(range(1, len(cps) + 1))
        assert [c.state.value for c in cps] == [
            "initialized",
            "executing",
            "validating",
            "deciding",
            "executing",
            "validating",
            "deciding",
            "completed",
        ]
        assert [c.iteration for c in cps] == [0, 1, 1, 1, 2, 2, 2, 2]
        assert {c.schema_version for c in cps} == {SCHEMA_VERSION}

    def test_a_checkpoint_is_read_back_exactly(self, store: LoopEngine) -> None:
        """Unicode, large text and nested JSON survive the round trip."""
        output = "ünïcødé ✓ " + "x" * 100_000 + " OK"
        loop = store.start("T-1", config(), prompt="p", context={"nested": {"a": [1, None]}})
        store.submit(loop.id, output)
        validating = next(c for c in store.checkpoints(loop.id) if c.state is State.VALIDATING)
        assert validating.data["output"] == output
        assert store.get(loop.id).context == {"nested": {"a": [1, None]}}

    def test_corrupt_checkpoint_json_is_a_clear_error(
        self, store: LoopEngine, store_url: str
    ) -> None:
        """A damaged checkpoint is CorruptRecordError naming the loop; other loops go on."""
        bad = store.start("T-1", config())
        good = store.start("T-2", config())
        sql(store_url, "UPDATE lw_checkpoints SET data='{not json' WHERE loop_id=:id", id=bad.id)
        with pytest.raises(CorruptRecordError, match=bad.id):
            store.checkpoints(bad.id)
        assert store.submit(good.id, DONE).state is State.COMPLETED

    def test_unknown_state_in_a_row_is_a_clear_error(
        self, store: LoopEngine, store_url: str
    ) -> None:
        """A loop row with an unknown state name is refused loudly."""
        loop = store.start("T-1", config())
        sql(store_url, "UPDATE lw_loops SET state='flying' WHERE id=:id", id=loop.id)
        with pytest.raises(CorruptRecordError, match="flying"):
            store.get(loop.id)


class TestLeases:
    """One owner at a time; a stale owner's write is rejected and changes nothing."""

    def test_a_held_lease_refuses_another_owner(self, store_url: str) -> None:
        """While A holds a live lease, B cannot write."""
        a = LoopEngine(store_url, owner="A")
        b = LoopEngine(store_url, owner="B")
        try:
            loop = a.start("T-1", config())
            with a.hold(loop.id):
                with pytest.raises(LeaseHeldError, match="A"):
                    b.submit(loop.id, "x")
                assert a.submit(loop.id, "no").state is State.EXECUTING
        finally:
            a.close()
            b.close()

    def test_an_expired_lease_is_taken_over_and_the_stale_write_rejected(
        self, store_url: str
    ) -> None:
        """B takes over after A's lease expires; A's next write fails and nothing changes."""
        a = LoopEngine(store_url, owner="A", lease_ttl=0.3)
        b = LoopEngine(store_url, owner="B")
        try:
            loop = a.start("T-1", config(), prompt="p")
            with a.hold(loop.id):
                time.sleep(0.4)
                assert b.submit(loop.id, "no").iteration == 1
                before = a.checkpoints(loop.id)
                with pytest.raises(StaleOwnerError, match="rejected"):
                    a.submit(loop.id, DONE)
                assert a.checkpoints(loop.id) == before
                assert a.get(loop.id).state is State.EXECUTING
                with pytest.raises(StaleOwnerError):
                    a.renew(loop.id)
        finally:
            a.close()
            b.close()

    def test_block_takes_the_lease_from_a_live_driver(self, store_url: str) -> None:
        """A human's block wins over a driver holding the lease; the driver is fenced."""
        a = LoopEngine(store_url, owner="A")
        human = LoopEngine(store_url, owner="human")
        try:
            loop = a.start("T-1", config())
            with a.hold(loop.id):
                assert human.block(loop.id, "stop").state is State.BLOCKED
                with pytest.raises(StaleOwnerError):
                    a.submit(loop.id, DONE)
            assert human.get(loop.id).terminal_reason is TerminalReason.BLOCKED_BY_USER
        finally:
            a.close()
            human.close()

    def test_the_epoch_grows_with_each_owner(self, store: LoopEngine, store_url: str) -> None:
        """Every acquisition bumps the epoch, so an old epoch can never match again."""
        loop = store.start("T-1", config())
        first = sql(store_url, "SELECT lease_epoch FROM lw_loops WHERE id=:id", id=loop.id)
        store.submit(loop.id, "no")
        second = sql(store_url, "SELECT lease_epoch FROM lw_loops WHERE id=:id", id=loop.id)
        assert int(second[0][0]) > int(first[0][0])  # type: ignore[call-overload]


class TestReading:
    """List, history and the last decision."""

    def test_list_filters_by_state_and_task_and_limits(self, store: LoopEngine) -> None:
        """Filters combine; results are oldest first; a limit cuts the list."""
        a = store.start("A", config())
        b = store.start("B", config())
        c = store.start("A", config())
        store.block(c.id, "x")
        assert [s.id for s in store.list()] == [a.id, b.id, c.id]
        assert [s.id for s in store.list(task_id="A")] == [a.id, c.id]
        assert [s.id for s in store.list(state="blocked")] == [c.id]
        assert [s.id for s in store.list(state=State.EXECUTING, task_id="A")] == [a.id]
        assert [s.id for s in store.list(limit=2)] == [a.id, b.id]
        assert store.list(task_id="none") == []

    def test_history_has_every_decided_iteration(self, store: LoopEngine) -> None:
        """History returns prompt, output, report, score and decision per iteration."""
        loop = store.start("T-1", config(), prompt="p")
        store.submit(loop.id, "no", files_modified=["a.py"])
        store.submit(loop.id, DONE)
        records = store.history(loop.id)
        assert [r.iteration for r in records] == [1, 2]
        assert records[0].output == "no"
        assert records[0].files_modified == ("a.py",)
        assert records[0].prompt == "p"
        assert records[0].decision.signal is Signal.CONTINUE
        assert records[0].report.results[0].passed is False
        assert records[1].decision.signal is Signal.COMPLETE
        assert records[1].decision.score == 100.0
        assert records[0].started_at <= records[0].submitted_at <= records[0].decided_at


class TestHooks:
    """The per-task hook registry is stored with the loops."""

    def test_register_list_disable_and_clear(self, store: LoopEngine, store_url: str) -> None:
        """Registrations keep their order and enabled flag, and survive a new engine."""
        first = store.hooks.register("T-1", "promise")
        second = store.hooks.register("T-1", "validation", metadata={"why": "test"})
        store.hooks.disable(first)
        other = LoopEngine(store_url)
        try:
            listed = other.hooks.list("T-1")
            assert [(h.id, h.enabled) for h in listed] == [(first, False), (second, True)]
            assert all(isinstance(h.enabled, bool) for h in listed)
            assert listed[1].metadata == {"why": "test"}
            assert other.hooks.clear("T-1") == 2
            assert store.hooks.list("T-1") == []
        finally:
            other.close()

    def test_a_registered_hook_decides(self, store: LoopEngine) -> None:
        """A stop hook stored for the task is consulted at deciding."""
        store.hooks.register("T-1", "promise")
        loop = store.start("T-1", config(rules=[]))
        assert store.submit(loop.id, "<promise>COMPLETE</promise>").state is State.COMPLETED


class TestSchemaVersion:
    """A database from a newer loopwarden is refused, and nothing is written to it."""

    def test_newer_schema_is_refused_without_writing(self, store_url: str) -> None:
        """Opening it raises SchemaVersionError naming both versions; the rows are untouched."""
        engine = LoopEngine(store_url)
        loop = engine.start("T-1", config())
        engine.close()
        sql(store_url, "UPDATE lw_meta SET value='999' WHERE key='schema_version'")
        before = sql(store_url, "SELECT id, seq, lease_epoch, lease_owner FROM lw_loops")
        with pytest.raises(SchemaVersionError, match=f"999.*{SCHEMA_VERSION}"):
            LoopEngine(store_url)
        assert sql(store_url, "SELECT id, seq, lease_epoch, lease_owner FROM lw_loops") == before
        assert sql(store_url, "SELECT value FROM lw_meta WHERE key='schema_version'") == [("999",)]
        assert before[0][0] == loop.id

    def test_reopening_the_same_version_keeps_the_data(self, store_url: str) -> None:
        """A second engine on the same database sees the first one's loops."""
        engine = LoopEngine(store_url)
        loop = engine.start("T-1", config())
        engine.close()
        again = LoopEngine(store_url)
        try:
            assert again.get(loop.id).state is State.EXECUTING
            assert again.submit(loop.id, DONE).state is State.COMPLETED
        finally:
            again.close()


class TestManualControl:
    """Changing the budget of a live loop."""

    def test_set_max_iterations(self, store: LoopEngine) -> None:
        """A raised budget is stored and used."""
        loop = store.start("T-1", config(max_iterations=1))
        assert store.set_max_iterations(loop.id, 3).max_iterations == 3
        assert store.submit(loop.id, "no").state is State.EXECUTING

    def test_terminal_loops_accept_nothing(self, store: LoopEngine) -> None:
        """Submitting to a completed loop is an InvalidTransitionError."""
        loop = store.start("T-1", config())
        store.submit(loop.id, DONE)
        with pytest.raises(InvalidTransitionError):
            store.submit(loop.id, DONE)
