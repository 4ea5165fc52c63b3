"""Persistence: the tables, the SQL (once), and the SQLite / PostgreSQL set-up."""

from loopwarden.store.database import Database, default_url, normalize_url
from loopwarden.store.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "Database", "default_url", "normalize_url"]
