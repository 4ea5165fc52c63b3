"""The database handle: statements compiled once, one driver connection, explicit transactions.

Every statement in ``queries`` is compiled for the backend's dialect when the database is
opened and run on the driver connection, which keeps it prepared (SQLite's statement cache,
psycopg's prepared statements). That keeps a durable transition close to the cost of the bare
INSERT + COMMIT it must contain; an ORM session or SQLAlchemy's per-execute bookkeeping on
this path would cost several times that.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from operator import itemgetter
from types import ModuleType
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from loopwarden.errors import StoreError
from loopwarden.store import migrate as migrations
from loopwarden.store import postgres, queries, sqlite
from loopwarden.store.schema import SCHEMA_VERSION

__all__ = ["DEFAULT_URL_PATH", "Database", "Prepared", "default_url", "normalize_url"]

DEFAULT_URL_PATH = os.path.join(".loopwarden", "loopwarden.db")
NO_LIMIT = 2**62


def default_url() -> str:
    """``LOOPWARDEN_DATABASE_URL``, else ``.loopwarden/loopwarden.db`` in the working directory."""
    env = os.environ.get("LOOPWARDEN_DATABASE_URL")
    if env:
        return normalize_url(env)
    return "sqlite:///" + os.path.abspath(DEFAULT_URL_PATH)


def normalize_url(url: str) -> str:
    """Accept a plain file path as a SQLite database; pass URLs through."""
    if "://" in url:
        if url.startswith(("postgresql://", "postgres://")):
            return "postgresql+psycopg://" + url.split("://", 1)[1]
        return url
    return "sqlite:///" + os.path.abspath(url)


def _backend(url: str) -> ModuleType:
    if url.startswith("sqlite"):
        return sqlite
    if url.startswith("postgresql"):
        return postgres
    raise StoreError(
        f"unsupported database URL {url.split('://', maxsplit=1)[0]}://...; use sqlite:///PATH or "
        "postgresql+psycopg://USER@HOST/DB"
    )


class Prepared:
    """One statement compiled for one dialect, with how to order its parameters."""

    __slots__ = ("_get", "names", "sql")

    def __init__(self, statement: ClauseElement, dialect: Any) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        fixed = [name for name, bp in compiled.binds.items() if not bp.required]
        if fixed:
            # A value baked into a statement would be lost: we bind from dicts, not the compiler.
            raise AssertionError(f"statement binds fixed values {fixed}: use bindparam/null()")
        self.sql: str = compiled.string
        self.names: tuple[str, ...] | None = (
            tuple(compiled.positiontup or ()) if compiled.positional else None
        )
        names = self.names or ()
        getter = itemgetter(*names) if names else None
        # itemgetter of one name returns the value, not a 1-tuple
        self._get = (lambda v: (getter(v),)) if len(names) == 1 and getter else getter

    def bind(self, values: Mapping[str, Any]) -> Any:
        if self._get is None:
            return values if self.names is None else ()
        return self._get(values)


_COMPILED: dict[tuple[Any, ...], dict[str, Prepared]] = {}
_COMPILED_LOCK = threading.Lock()


def _compiled(dialect: Any) -> dict[str, Prepared]:
    """Every statement compiled for this kind of dialect; once per process, not per database."""
    key = (dialect.name, dialect.driver, dialect.paramstyle, dialect.server_version_info)
    with _COMPILED_LOCK:
        found = _COMPILED.get(key)
        if found is None:
            found = {name: Prepared(stmt, dialect) for name, stmt in queries.ALL.items()}
            _COMPILED[key] = found
        return found


class Database:
    """A loopwarden database. Thread-safe: one connection, used under a lock."""

    def __init__(
        self, url: str | None = None, *, create: bool = True, migrate: bool = True
    ) -> None:
        self.url = normalize_url(url) if url else default_url()
        self.backend = _backend(self.url)
        self._lock = threading.RLock()
        try:
            self.engine = self.backend.make_engine(self.url, create=create)
            self._pooled = self.engine.raw_connection()
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise self._classify(exc) from None
        self._driver: Any = self._pooled.driver_connection
        dialect = self.engine.dialect
        self._q = _compiled(dialect)
        try:
            self.backend.configure_connection(self._driver)
            if migrate:
                self._ensure_schema(create)
        except BaseException:
            self.close()
            raise

    def _classify(self, exc: BaseException) -> StoreError:
        found: StoreError | None = self.backend.classify(exc, self.url)
        return found or StoreError(f"database error on {self.safe_url()}: {exc}")

    def safe_url(self) -> str:
        """The URL without its credentials, for messages."""
        scheme, _, rest = self.url.partition("://")
        return f"{scheme}://{rest.split('@')[-1]}"

    def schema_version(self) -> int | None:
        """The schema version the database records; None when it has no loopwarden tables."""
        try:
            if not inspect(self.engine).has_table("lw_meta"):
                return None
            row = self.fetch_one("get_meta", {"key": "schema_version"})
        except SQLAlchemyError as exc:
            raise self._classify(exc) from None
        return int(row["value"]) if row else 0

    def _ensure_schema(self, create: bool) -> None:
        """Refuse a newer schema without writing; migrate an older or empty one.

        The common case (the database is at this version) costs one read and no alembic.
        """
        found = self.schema_version()
        if found is not None and found > SCHEMA_VERSION:
            raise migrations.newer_error(found, self.safe_url())
        if found == SCHEMA_VERSION:
            return
        if found is None and not create:
            raise StoreError(f"{self.safe_url()} is not a loopwarden database")
        try:
            migrations.run_migrations(self.engine, self.backend, self.safe_url())
        except SQLAlchemyError as exc:
            raise self._classify(exc) from None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """A write transaction (BEGIN IMMEDIATE on SQLite); rolled back on any exception."""
        with self._lock:
            self._run(self.backend.BEGIN)
            try:
                yield
                self._run("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):
                    self._run("ROLLBACK")
                raise

    def _run(self, sql: str, params: Any = ()) -> Any:
        try:
            return self._driver.execute(sql, params)
        except Exception as exc:
            if type(exc).__module__.startswith(("sqlite3", "psycopg")):
                raise self._classify(exc) from exc
            raise

    def execute(self, name: str, values: Mapping[str, Any]) -> int:
        """Run a prepared write; the number of rows it touched."""
        q = self._q[name]
        with self._lock:
            return int(self._run(q.sql, q.bind(values)).rowcount)

    def execute_many(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run a prepared write once per row (inside the caller's transaction)."""
        if not rows:
            return
        q = self._q[name]
        with self._lock:
            try:
                self._driver.cursor().executemany(q.sql, [q.bind(r) for r in rows])
            except Exception as exc:
                if type(exc).__module__.startswith(("sqlite3", "psycopg")):
                    raise self._classify(exc) from exc
                raise

    def fetch_one(self, name: str, values: Mapping[str, Any]) -> dict[str, Any] | None:
        q = self._q[name]
        with self._lock:
            cursor = self._run(q.sql, q.bind(values))
            row = cursor.fetchone()
            if row is None:
                return None
            return dict(zip([d[0] for d in cursor.description], row, strict=True))

    def fetch_all(self, name: str, values: Mapping[str, Any]) -> list[dict[str, Any]]:
        q = self._q[name]
        with self._lock:
            cursor = self._run(q.sql, q.bind(values))
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def close(self) -> None:
        with self._lock:
            with contextlib.suppress(Exception):
                if getattr(self._driver, "closed", False) or getattr(self._driver, "broken", False):
                    # A lost PostgreSQL connection: resetting it for the pool would only fail.
                    self._pooled.invalidate()
                else:
                    self._pooled.close()
            self.engine.dispose()
