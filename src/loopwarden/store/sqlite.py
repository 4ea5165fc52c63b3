"""SQLite set-up: WAL, busy_timeout, write transactions that begin IMMEDIATE.

Only engine set-up and error classification live here; the SQL is in ``queries``.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from loopwarden.errors import StoreError

__all__ = [
    "BEGIN",
    "BUSY_TIMEOUT_MS",
    "MIGRATION_LOCK",
    "classify",
    "configure_connection",
    "database_path",
    "make_engine",
]

BEGIN = "BEGIN IMMEDIATE"
# BEGIN IMMEDIATE already makes concurrent migrations wait for each other.
MIGRATION_LOCK = None
BUSY_TIMEOUT_MS = 10_000


def database_path(url: str) -> Path | None:
    """The file behind a SQLite URL, or None for an in-memory database."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    return Path(database)


def _set_wal(connection: sqlite3.Connection) -> None:
    """Switch to WAL, waiting out other connections doing the same on a new file.

    Changing the journal mode needs the file to itself, and SQLite may answer "database is
    locked" at once rather than through the busy handler when several processes open a new
    database together; so retry for as long as the busy timeout would have waited.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def make_engine(url: str, *, create: bool) -> Engine:
    path = database_path(url)
    if path is not None:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.exists():
            raise StoreError(
                f"no loopwarden database at {path}; start a loop first (or pass --db / "
                "LOOPWARDEN_DATABASE_URL to use another one)"
            )
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
    if path is None:
        kwargs["poolclass"] = StaticPool
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        # We issue BEGIN ourselves; the driver must not open transactions behind our back.
        dbapi_connection.isolation_level = None
        dbapi_connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if path is not None:
            _set_wal(dbapi_connection)
        dbapi_connection.execute("PRAGMA synchronous = NORMAL")

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql(BEGIN)

    return engine


def configure_connection(driver: sqlite3.Connection) -> None:
    """Nothing more: every connection is configured when it is opened (see make_engine)."""
    del driver


def classify(exc: BaseException, url: str) -> StoreError | None:
    """A clear StoreError for the SQLite errors a user can act on, else None."""
    text = str(exc)
    if "file is not a database" in text:
        return StoreError(f"{database_path(url)} is not a SQLite database; point --db elsewhere")
    if "unable to open database file" in text:
        return StoreError(f"cannot open the database file {database_path(url)}: {text}")
    if "database is locked" in text:
        return StoreError(
            f"the database {database_path(url)} stayed locked for {BUSY_TIMEOUT_MS / 1000:g}s "
            "by another process; retry when it is less busy"
        )
    if "readonly database" in text:
        return StoreError(f"the database {database_path(url)} is read-only")
    return None
