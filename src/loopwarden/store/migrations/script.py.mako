"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}

# The schema version this revision brings the database to (lw_meta keeps it, so a loopwarden
# older than this refuses the database without writing). Bump SCHEMA_VERSION in schema.py to it.
SCHEMA_VERSION = 0


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}
    op.execute(
        sa.text("UPDATE lw_meta SET value = :v WHERE key = 'schema_version'").bindparams(
            v=str(SCHEMA_VERSION)
        )
    )


def downgrade() -> None:
    raise NotImplementedError("loopwarden schema migrations are forward-only")
