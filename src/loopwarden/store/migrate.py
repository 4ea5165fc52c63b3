"""Schema migrations with alembic: run on first use of a database and by ``loopwarden db upgrade``.

The revisions live in ``migrations/versions`` inside the package, so an installed wheel can
upgrade a database. Revision ``NNNN`` brings a database to schema version ``NNNN``; each one
also writes that number into ``lw_meta``, the one place an older loopwarden looks before it
refuses a database without writing to it.

A database created before loopwarden used alembic has ``lw_meta`` but no alembic version
table: it is stamped with the revision of its stored version, then upgraded as usual. Upgrades
run in one transaction that other processes wait for (BEGIN IMMEDIATE on SQLite, an advisory
lock on PostgreSQL), so two processes opening a new database at once create it once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, inspect

from loopwarden.errors import SchemaVersionError, StoreError
from loopwarden.store import queries
from loopwarden.store.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "MIGRATIONS",
    "VERSION_TABLE",
    "Upgrade",
    "alembic_config",
    "head_revision",
    "revision_id",
    "run_migrations",
    "stored_version",
    "upgrade",
]

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "lw_alembic_version"


def revision_id(version: int) -> str:
    """The alembic revision that brings a database to schema ``version``."""
    return f"{version:04d}"


def alembic_config(url: str | None = None) -> Config:
    """An alembic Config for loopwarden's migrations (no alembic.ini needed)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if url:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str:
    """The newest revision shipped with this loopwarden."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - a broken package
        raise StoreError(f"no schema migrations found in {MIGRATIONS}")
    return head


def stored_version(connection: Connection) -> int | None:
    """The schema version ``lw_meta`` records; None when loopwarden's tables are not there."""
    if not inspect(connection).has_table("lw_meta"):
        return None
    row = connection.execute(queries.get_meta, {"key": "schema_version"}).first()
    return int(row[0]) if row else 0


def newer_error(found: int, where: str) -> SchemaVersionError:
    return SchemaVersionError(
        f"the database {where} has schema version {found}, newer than this loopwarden's "
        f"{SCHEMA_VERSION}; upgrade loopwarden (nothing was written)"
    )


def run_migrations(engine: Engine, backend: ModuleType, where: str) -> tuple[int, int]:
    """Bring the database to this loopwarden's schema in one transaction; (before, after)."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    config = alembic_config()
    with engine.begin() as connection:
        lock: str | None = backend.MIGRATION_LOCK
        if lock:
            connection.exec_driver_sql(lock)
        before = stored_version(connection) or 0
        if before > SCHEMA_VERSION:
            raise newer_error(before, where)
        if before == SCHEMA_VERSION and _has_revision(connection):
            return before, before  # another process upgraded it while we waited
        if before:
            context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
            if context.get_current_revision() is None:
                context.stamp(ScriptDirectory.from_config(config), revision_id(before))
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
        after = stored_version(connection) or 0
        if after != SCHEMA_VERSION:
            raise StoreError(
                f"the migrations left {where} at schema version {after}, not {SCHEMA_VERSION}: "
                "this loopwarden's migrations and its SCHEMA_VERSION disagree (a packaging bug)"
            )
    return before, after


def _has_revision(connection: Connection) -> bool:
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision() is not None


@dataclass(frozen=True, slots=True)
class Upgrade:
    """What ``upgrade`` did: the schema version before and after, and the alembic revision."""

    url: str
    before: int
    after: int
    revision: str

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "before": self.before,
            "after": self.after,
            "revision": self.revision,
            "changed": self.changed,
        }


def upgrade(url: str | None = None, *, create: bool = True) -> Upgrade:
    """Bring a database to this loopwarden's schema (``loopwarden db upgrade``).

    ``create=False`` refuses a SQLite file that does not exist instead of creating it. A
    database from a newer loopwarden raises SchemaVersionError and is not written to.
    """
    from loopwarden.store.database import Database

    db = Database(url, create=create, migrate=False)
    try:
        before = db.schema_version()
        if before is not None and before > SCHEMA_VERSION:
            raise newer_error(before, db.safe_url())
        _b, after = run_migrations(db.engine, db.backend, db.safe_url())
        with db.engine.connect() as connection:
            from alembic.runtime.migration import MigrationContext

            context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
            revision = context.get_current_revision() or ""
        return Upgrade(db.safe_url(), before or 0, after, revision)
    finally:
        db.close()
