"""Schema migrations: run on first use, by ``upgrade()``, and on every released schema version."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text

from loopwarden import LoopEngine, SchemaVersionError, State, StoreError
from loopwarden.store import SCHEMA_VERSION, Database
from loopwarden.store.migrate import (
    MIGRATIONS,
    VERSION_TABLE,
    head_revision,
    revision_id,
    upgrade,
)
from loopwarden.store.schema import metadata

pytest_plugins = ["postgres_fixture"]

GOLDEN = Path(__file__).parent / "golden"
DONE = "OK <promise>COMPLETE</promise> after the upgrade"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'migrate.db'}"
    url: str = request.getfixturevalue("fresh_pg_url")
    return url


def sql(url: str, statement: str) -> list[tuple[object, ...]]:
    eng = create_engine(url)
    try:
        with eng.begin() as conn:
            result = conn.execute(text(statement))
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        eng.dispose()


def revision(url: str) -> str | None:
    eng = create_engine(url)
    try:
        with eng.connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return context.get_current_revision()
    finally:
        eng.dispose()


class TestRevisions:
    """The shipped revisions and the schema version agree."""

    def test_head_is_the_schema_version(self) -> None:
        """Revision NNNN brings a database to schema version NNNN; head is this version."""
        assert head_revision() == revision_id(SCHEMA_VERSION)

    def test_one_revision_file_per_schema_version(self) -> None:
        """Versions 1..SCHEMA_VERSION each have exactly one revision file."""
        files = sorted(p.name for p in (MIGRATIONS / "versions").glob("*.py"))
        assert [f[:4] for f in files] == [revision_id(v) for v in range(1, SCHEMA_VERSION + 1)]


class TestFirstUse:
    """Opening a new database migrates it to head."""

    def test_a_new_database_is_at_head(self, store_url: str) -> None:
        """The tables, lw_meta's version and alembic's revision all say the same version."""
        LoopEngine(store_url).close()
        assert revision(store_url) == head_revision()
        assert sql(store_url, "SELECT value FROM lw_meta WHERE key='schema_version'") == [
            (str(SCHEMA_VERSION),)
        ]

    def test_the_migrated_schema_matches_the_tables(self, store_url: str) -> None:
        """Running the migrations yields exactly the schema the SQLModel tables declare."""
        LoopEngine(store_url).close()
        eng = create_engine(store_url)
        try:
            with eng.connect() as conn:
                context = MigrationContext.configure(
                    conn, opts={"version_table": VERSION_TABLE, "compare_type": True}
                )
                assert compare_metadata(context, metadata) == []
        finally:
            eng.dispose()

    def test_concurrent_first_use_creates_the_schema_once(self, store_url: str) -> None:
        """Four engines opening the same new database at once all succeed."""
        errors: list[BaseException] = []
        barrier = threading.Barrier(4)

        def open_it() -> None:
            try:
                barrier.wait()
                Database(store_url).close()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sql(store_url, f"SELECT count(*) FROM {VERSION_TABLE}") == [(1,)]

    def test_create_false_refuses_a_missing_sqlite_file(self, tmp_path: Path) -> None:
        """Reading commands do not create a database where there is none."""
        with pytest.raises(StoreError, match="no loopwarden database"):
            LoopEngine(f"sqlite:///{tmp_path / 'none.db'}", create=False)
        assert not (tmp_path / "none.db").exists()


class TestUpgrade:
    """``upgrade(url)``, behind ``loopwarden db upgrade``."""

    def test_upgrade_creates_then_is_a_no_op(self, store_url: str) -> None:
        """The first upgrade creates the schema; the second changes nothing."""
        first = upgrade(store_url)
        assert (first.before, first.after, first.changed) == (0, SCHEMA_VERSION, True)
        assert first.revision == head_revision()
        second = upgrade(store_url)
        assert (second.before, second.after, second.changed) == (
            SCHEMA_VERSION,
            SCHEMA_VERSION,
            False,
        )
        assert "@" not in second.url

    def test_a_newer_database_is_refused_without_writing(self, store_url: str) -> None:
        """SchemaVersionError names both versions; the stored rows are untouched."""
        engine = LoopEngine(store_url)
        engine.start("T-1")
        engine.close()
        sql(store_url, "UPDATE lw_meta SET value='999' WHERE key='schema_version'")
        before = sql(store_url, "SELECT id, seq, lease_epoch, lease_owner FROM lw_loops")
        with pytest.raises(SchemaVersionError, match=f"999.*{SCHEMA_VERSION}"):
            upgrade(store_url)
        with pytest.raises(SchemaVersionError, match="nothing was written"):
            LoopEngine(store_url)
        assert sql(store_url, "SELECT id, seq, lease_epoch, lease_owner FROM lw_loops") == before
        assert revision(store_url) == head_revision()


@pytest.fixture(params=sorted(p.name for p in GOLDEN.glob("schema-v*.db")))
def golden(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A copy of a golden database of a released schema version (never the file itself)."""
    copy = tmp_path / request.param
    shutil.copyfile(GOLDEN / request.param, copy)
    return f"sqlite:///{copy}"


class TestGoldenDatabases:
    """Every released schema version opens, upgrades and resumes."""

    def test_there_is_a_golden_database_of_this_version(self) -> None:
        """The current schema version has its golden file (make it with make_golden.py)."""
        assert (GOLDEN / f"schema-v{SCHEMA_VERSION}.db").exists()

    def test_it_upgrades_to_head(self, golden: str) -> None:
        """upgrade() brings it to this version's revision, keeping every loop."""
        result = upgrade(golden, create=False)
        assert (result.after, result.revision) == (SCHEMA_VERSION, head_revision())
        assert sql(golden, "SELECT count(*) FROM lw_loops") == [(6,)]

    def test_every_loop_resumes_to_completion(self, golden: str) -> None:
        """Loops left initialized, executing, validating and deciding all finish; others stay."""
        engine = LoopEngine(golden)
        try:
            assert engine.resume("g-validating").state is State.COMPLETED
            assert engine.resume("g-deciding").state is State.COMPLETED
            assert engine.resume("g-initialized").state is State.EXECUTING
            for loop_id in ("g-initialized", "g-executing"):
                assert engine.submit(loop_id, DONE).state is State.COMPLETED
            assert engine.reopen("g-blocked", note="go on").state is State.EXECUTING
            assert engine.submit("g-blocked", DONE).state is State.COMPLETED
            assert [r.iteration for r in engine.history("g-completed")] == [1, 2]
            assert [h.name for h in engine.hooks.list("golden-hooks")] == ["default"]
            for snapshot in engine.list():
                assert snapshot.state is State.COMPLETED
                seqs = [c.seq for c in engine.checkpoints(snapshot.id)]
                assert seqs == list(range(1, len(seqs) + 1))
        finally:
            engine.close()
