"""Alembic environment for loopwarden's schema (both SQLite and PostgreSQL).

loopwarden runs the migrations itself (``loopwarden.store.migrate``), handing over a connection
already inside the transaction it will commit; the alembic command line works too, given
``-x url=...`` or a ``sqlalchemy.url`` option.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from loopwarden.store.migrate import VERSION_TABLE
from loopwarden.store.schema import metadata

config = context.config


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        render_as_batch=True,  # SQLite alters tables by copying them
    )
    with context.begin_transaction():
        context.run_migrations()


given = config.attributes.get("connection")
if given is not None:
    _run(given)
else:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("pass the database with -x url=URL")
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            _run(connection)
            connection.commit()
    finally:
        engine.dispose()
