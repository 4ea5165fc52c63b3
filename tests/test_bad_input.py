"""Bad input fails loudly and early, names what is wrong, and leaves other loops alone."""

from __future__ import annotations

import hashlib
import math
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from _driver import leave_in
from loopwarden import (
    ConfigError,
    CorruptRecordError,
    LoopConfig,
    LoopEngine,
    LoopNotFoundError,
    SchemaVersionError,
    Signal,
    State,
    StoreError,
    rules,
)
from loopwarden.store import SCHEMA_VERSION

OK_RULE = rules.pattern("says-ok", r"\bOK\b")
DONE = "OK <promise>COMPLETE</promise>"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "loopwarden.db"


@pytest.fixture
def url(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture
def other(url: str) -> str:
    """A healthy loop in the same database, one iteration in."""
    with LoopEngine(url) as engine:
        loop = engine.start("OTHER", LoopConfig(rules=[OK_RULE]), prompt="p")
        engine.submit(loop.id, "not yet")
        return loop.id


def assert_unaffected(url: str, loop_id: str) -> None:
    """The other loop still resumes and completes, with its history intact."""
    with LoopEngine(url) as engine:
        assert engine.resume(loop_id).state is State.EXECUTING
        assert engine.submit(loop_id, DONE).signal is Signal.COMPLETE
        assert [r.iteration for r in engine.history(loop_id)] == [1, 2]


def sql(path: Path, statement: str, *params: Any) -> None:
    con = sqlite3.connect(path)
    try:
        with con:
            con.execute(statement, params)
    finally:
        con.close()


class TestConfigErrors:
    """Each invalid config field is a ConfigError naming it, before any loop exists."""

    @pytest.mark.parametrize(
        ("make", "field"),
        [
            (lambda: LoopConfig(max_iterations=0), "max_iterations"),
            (lambda: LoopConfig(max_iterations=-3), "max_iterations"),
            (lambda: LoopConfig(max_iterations="5"), "max_iterations"),
            (lambda: LoopConfig(max_iterations=True), "max_iterations"),
            (lambda: LoopConfig(circuit_breaker_threshold=0), "circuit_breaker_threshold"),
            (lambda: LoopConfig(regression_window=1), "regression_window"),
            (lambda: LoopConfig(regression_min_drop=-1), "regression_min_drop"),
            (lambda: LoopConfig(regression_min_drop=math.nan), "regression_min_drop"),
            (lambda: LoopConfig(completion="sometimes"), "completion"),
            (lambda: LoopConfig(completion="rules"), "completion"),
            (lambda: LoopConfig(feedback_limit=10), "feedback_limit"),
            (lambda: LoopConfig(max_stop_retries=-1), "max_stop_retries"),
            (lambda: LoopConfig(completion_promises=[]), "completion_promises"),
            (lambda: LoopConfig(completion_promises=["ALL DONE"]), "completion_promises"),
            (lambda: LoopConfig(blocked_promises=["COMPLETE"]), "blocked_promises"),
            (lambda: LoopConfig(rules="pytest"), "rules"),
            (lambda: LoopConfig(rules=[lambda s: True]), "rules[0]"),
            (lambda: LoopConfig(rules=[OK_RULE, OK_RULE]), "rules[1].name"),
            (lambda: rules.pattern("bad-regex", "(unclosed"), "rules[bad-regex].pattern"),
            (lambda: rules.pattern("p", "x", target="stdout"), "rules[p].target"),
            (lambda: rules.pattern("bad name!", "x"), "rule.name"),
            (lambda: rules.command("c", []), "rules[c].command"),
            (lambda: rules.command("c", ["true"], timeout=0), "rules[c].timeout"),
            (lambda: rules.coverage("cov", "c.json", minimum=150), "rules[cov].minimum"),
            (lambda: rules.predicate("pred", "not callable"), "rules[pred].fn"),
        ],
    )
    def test_invalid_field(
        self, make: Callable[[], object], field: str, url: str, other: str
    ) -> None:
        """ConfigError with .field set and the field first in the message."""
        with LoopEngine(url) as engine:
            with pytest.raises(ConfigError) as info:
                engine.start("T", make())  # type: ignore[arg-type]
            assert info.value.field == field
            assert str(info.value).startswith(f"{field}: ")
            assert [s.id for s in engine.list()] == [other]
        assert_unaffected(url, other)

    def test_a_bad_regex_says_what_is_wrong(self) -> None:
        """The message quotes the regex and the reason it does not compile."""
        with pytest.raises(ConfigError, match=r"invalid regular expression '\(unclosed'"):
            rules.pattern("bad-regex", "(unclosed")

    @pytest.mark.parametrize(
        ("data", "field"),
        [
            ({"max_iterations": 0}, "max_iterations"),
            ({"speed": "fast"}, "speed"),
            ({"rules": [{"type": "pattern", "name": "p", "pattern": "("}]}, "rules[0].pattern"),
            ({"rules": [{"type": "telepathy", "name": "t"}]}, "rules[0].type"),
        ],
    )
    def test_a_config_from_json_names_the_field(self, data: dict[str, Any], field: str) -> None:
        """LoopConfig.from_dict validates as the constructor does."""
        with pytest.raises(ConfigError) as info:
            LoopConfig.from_dict(data)
        assert info.value.field == field

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"task_id": ""}, "task_id"),
            ({"task_id": "x" * 201}, "task_id"),
            ({"prompt": 42}, "prompt"),
            ({"context": {"when": object()}}, "context"),
            ({"config": {"max_iterations": 3}}, "config"),
        ],
    )
    def test_invalid_start_arguments(
        self, kwargs: dict[str, Any], field: str, url: str, other: str
    ) -> None:
        """start() checks its own arguments before writing anything."""
        args = {"task_id": "T", **kwargs}
        with LoopEngine(url) as engine:
            with pytest.raises(ConfigError) as info:
                engine.start(args.pop("task_id"), **args)
            assert info.value.field == field
            assert [s.id for s in engine.list()] == [other]
        assert_unaffected(url, other)


class TestSubmitArguments:
    """Invalid submit arguments are refused before anything is written."""

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"output": 123}, "output"),
            ({"output": None}, "output"),
            ({"output": b"bytes"}, "output"),
            ({"context": {"handle": object()}}, "context"),
            ({"context": {"nums": {1, 2}}}, "context"),
            ({"files_modified": "a.py"}, "files_modified"),
            ({"files_modified": [1]}, "files_modified"),
            ({"draft": 5}, "draft"),
        ],
    )
    def test_invalid_argument(self, kwargs: dict[str, Any], field: str, url: str) -> None:
        """ConfigError naming the argument; the loop is unchanged and still usable."""
        with LoopEngine(url) as engine:
            loop = engine.start("T", LoopConfig(rules=[OK_RULE]))
            before = engine.checkpoints(loop.id)
            args = {"output": "OK", **kwargs}
            with pytest.raises(ConfigError) as info:
                engine.submit(loop.id, args.pop("output"), **args)
            assert info.value.field == field
            assert engine.checkpoints(loop.id) == before
            assert engine.submit(loop.id, DONE).signal is Signal.COMPLETE


class TestCorruptCheckpoint:
    """A checkpoint whose JSON is damaged is reported, naming the loop and the checkpoint."""

    @pytest.mark.parametrize("state", ["validating", "deciding"])
    def test_resume_names_loop_and_seq(self, state: str, url: str, path: Path, other: str) -> None:
        """resume() from a state that reads its checkpoint raises CorruptRecordError."""
        with LoopEngine(url) as engine:
            loop = engine.start("T", LoopConfig(rules=[OK_RULE]))
        leave_in(url, loop.id, state, "OK")
        seq = 3 if state == "validating" else 4
        sql(
            path,
            "UPDATE lw_checkpoints SET data = ? WHERE loop_id = ? AND seq = ?",
            '{"output": "OK", trunc',
            loop.id,
            seq,
        )
        with LoopEngine(url) as engine:
            with pytest.raises(CorruptRecordError) as info:
                engine.resume(loop.id)
            assert loop.id in str(info.value)
            assert f"checkpoint {seq}" in str(info.value)
            assert engine.get(loop.id).state == state
        assert_unaffected(url, other)

    def test_valid_json_without_the_evidence_is_also_corrupt(
        self, url: str, path: Path, other: str
    ) -> None:
        """A deciding checkpoint that lost its evidence cannot be decided from."""
        with LoopEngine(url) as engine:
            loop = engine.start("T", LoopConfig(rules=[OK_RULE]))
        leave_in(url, loop.id, "deciding", "OK")
        sql(path, "UPDATE lw_checkpoints SET data = '{}' WHERE loop_id = ? AND seq = 4", loop.id)
        with LoopEngine(url) as engine, pytest.raises(CorruptRecordError, match="checkpoint 4"):
            engine.resume(loop.id)
        assert_unaffected(url, other)

    def test_listing_checkpoints_names_the_damaged_one(
        self, url: str, path: Path, other: str
    ) -> None:
        """checkpoints() raises CorruptRecordError naming the loop and seq."""
        with LoopEngine(url) as engine:
            loop = engine.start("T", LoopConfig(rules=[OK_RULE]))
        sql(path, "UPDATE lw_checkpoints SET data = 'nul' WHERE loop_id = ? AND seq = 2", loop.id)
        with (
            LoopEngine(url) as engine,
            pytest.raises(CorruptRecordError, match=f"loop {loop.id}: checkpoint 2"),
        ):
            engine.checkpoints(loop.id)
        assert_unaffected(url, other)

    @pytest.mark.parametrize("column", ["config", "context", "scores"])
    def test_a_damaged_loop_column_names_the_loop_and_column(
        self, column: str, url: str, path: Path, other: str
    ) -> None:
        """The loop row's JSON columns are checked when the loop is loaded."""
        with LoopEngine(url) as engine:
            loop = engine.start("T", LoopConfig(rules=[OK_RULE]))
        sql(path, f"UPDATE lw_loops SET {column} = '[1,' WHERE id = ?", loop.id)
        with LoopEngine(url) as engine:
            with pytest.raises(CorruptRecordError) as info:
                engine.resume(loop.id)
            assert loop.id in str(info.value)
            assert column in str(info.value)
        assert_unaffected(url, other)


VALID_STATES = ("initialized", "executing", "validating", "deciding", "completed", "blocked")


class TestUnknownState:
    """A state name the machine does not know is reported with the valid ones."""

    def test_unknown_state_in_the_loop_row(self, url: str, path: Path, other: str) -> None:
        """resume() and get() raise CorruptRecordError listing the valid states."""
        with LoopEngine(url) as engine:
            loop = engine.start("T", LoopConfig(rules=[OK_RULE]))
        sql(path, "UPDATE lw_loops SET state = 'running' WHERE id = ?", loop.id)
        with LoopEngine(url) as engine:
            for call in (engine.resume, engine.get):
                with pytest.raises(CorruptRecordError, match="'running'") as info:
                    call(loop.id)
                assert all(s in str(info.value) for s in (*VALID_STATES, "escalated"))
        assert_unaffected(url, other)

    def test_the_error_names_the_loop(self, url: str, path: Path) -> None:
        """With many loops, the message says which one is damaged."""
        with LoopEngine(url) as engine:
            loop = engine.start("T", LoopConfig(rules=[OK_RULE]))
        sql(path, "UPDATE lw_loops SET state = 'running' WHERE id = ?", loop.id)
        with LoopEngine(url) as engine, pytest.raises(CorruptRecordError, match=loop.id):
            engine.resume(loop.id)

    def test_unknown_state_in_a_checkpoint_row(self, url: str, path: Path, other: str) -> None:
        """checkpoints() raises CorruptRecordError listing the valid states."""
        with LoopEngine(url) as engine:
            loop = engine.start("T", LoopConfig(rules=[OK_RULE]))
        sql(path, "UPDATE lw_checkpoints SET state = 'paused' WHERE loop_id = ?", loop.id)
        with LoopEngine(url) as engine:
            with pytest.raises(CorruptRecordError, match="'paused'") as info:
                engine.checkpoints(loop.id)
            assert all(s in str(info.value) for s in VALID_STATES)
        assert_unaffected(url, other)


def _files(directory: Path) -> dict[str, tuple[str, int]]:
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(directory.iterdir())
    }


class TestNewerSchema:
    """A database written by a newer loopwarden is refused without writing."""

    @pytest.mark.parametrize("create", [True, False])
    def test_opening_raises_and_leaves_the_file_unchanged(
        self, create: bool, url: str, path: Path, other: str
    ) -> None:
        """SchemaVersionError naming both versions; the files are byte-for-byte the same."""
        sql(path, "UPDATE lw_meta SET value = '999' WHERE key = 'schema_version'")
        before = _files(path.parent)
        with pytest.raises(SchemaVersionError, match="999") as info:
            LoopEngine(url, create=create)
        assert str(SCHEMA_VERSION) in str(info.value)
        assert isinstance(info.value, StoreError)
        assert _files(path.parent) == before
        sql(path, "UPDATE lw_meta SET value = ? WHERE key = 'schema_version'", SCHEMA_VERSION)
        assert_unaffected(url, other)


class TestUnknownLoop:
    """An id that is not in the database is a LoopNotFoundError naming it."""

    @pytest.mark.parametrize(
        "call",
        [
            lambda e: e.get("nope"),
            lambda e: e.resume("nope"),
            lambda e: e.submit("nope", "output"),
            lambda e: e.block("nope", "why"),
            lambda e: e.reopen("nope", extra_iterations=1),
            lambda e: e.set_max_iterations("nope", 5),
            lambda e: e.history("nope"),
            lambda e: e.checkpoints("nope"),
        ],
    )
    def test_every_entry_point(
        self, call: Callable[[LoopEngine], object], url: str, other: str
    ) -> None:
        """LoopNotFoundError (a LookupError) with the id in the message."""
        with LoopEngine(url) as engine:
            with pytest.raises(LoopNotFoundError, match="'nope'") as info:
                call(engine)
            assert isinstance(info.value, LookupError)
        assert_unaffected(url, other)
