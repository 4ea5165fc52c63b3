"""PostgreSQL set-up (psycopg 3). Only engine set-up and error classification live here."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine

from loopwarden.errors import StoreError

__all__ = ["BEGIN", "MIGRATION_LOCK", "classify", "configure_connection", "make_engine"]

BEGIN = "BEGIN"
# Held for the migration's transaction, so concurrent first uses migrate one at a time.
MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(7250513)"


def make_engine(url: str, *, create: bool) -> Engine:
    del create  # a PostgreSQL database is created by its administrator, never by us
    return create_engine(url, pool_pre_ping=True)


def configure_connection(driver: Any) -> None:
    """The store's own connection: autocommit, so the only transactions are our BEGIN/COMMIT.

    psycopg prepares a statement on the server after ``prepare_threshold`` (5) executions of
    the same text, which every statement on the transition path reaches at once.
    """
    driver.rollback()  # a pool pre-ping may have left a transaction open
    driver.autocommit = True


def classify(exc: BaseException, url: str) -> StoreError | None:
    """A clear StoreError for connection failures, else None."""
    name = type(exc).__name__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else name
    if "OperationalError" in name or "connection" in text.lower():
        host = url.rsplit("@", maxsplit=1)[-1]
        return StoreError(f"cannot connect to PostgreSQL at {host}: {text}")
    return None
