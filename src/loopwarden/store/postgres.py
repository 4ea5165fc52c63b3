"""PostgreSQL set-up (psycopg 3). Only engine set-up and error classification live here."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event

from loopwarden.errors import StoreError

__all__ = ["BEGIN", "classify", "make_engine"]

BEGIN = "BEGIN"


def make_engine(url: str, *, create: bool) -> Engine:
    del create  # a PostgreSQL database is created by its administrator, never by us
    engine = create_engine(url, pool_pre_ping=True)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: object) -> None:
        dbapi_connection.autocommit = True

    return engine


def classify(exc: BaseException, url: str) -> StoreError | None:
    """A clear StoreError for connection failures, else None."""
    name = type(exc).__name__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else name
    if "OperationalError" in name or "connection" in text.lower():
        host = url.rsplit("@", maxsplit=1)[-1]
        return StoreError(f"cannot connect to PostgreSQL at {host}: {text}")
    return None
