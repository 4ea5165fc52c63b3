"""Baseline: the schema of loopwarden 0.1 (schema version 1).

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SCHEMA_VERSION = 1


def upgrade() -> None:
    op.create_table(
        "lw_loops",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("task_id", sa.String(200), nullable=False),
        sa.Column("parent_id", sa.String(64), nullable=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("last_decided", sa.Integer, nullable=False),
        sa.Column("max_iterations", sa.Integer, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("config", sa.Text, nullable=False),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("current_prompt", sa.Text, nullable=False),
        sa.Column("context", sa.Text, nullable=False),
        sa.Column("consecutive_failures", sa.Integer, nullable=False),
        sa.Column("stop_retries", sa.Integer, nullable=False),
        sa.Column("scores", sa.Text, nullable=False),
        sa.Column("terminal_reason", sa.String(40), nullable=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("meta", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_epoch", sa.Integer, nullable=False),
        sa.Column("lease_expires", sa.Float, nullable=False),
        sa.Column("lease_pid", sa.Integer, nullable=True),
        sa.Column("lease_host", sa.String(255), nullable=True),
    )
    op.create_index("ix_lw_loops_task_id", "lw_loops", ["task_id"])
    op.create_table(
        "lw_checkpoints",
        sa.Column("loop_id", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("trigger", sa.String(20), nullable=False),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.create_table(
        "lw_iterations",
        sa.Column("loop_id", sa.String(64), primary_key=True),
        sa.Column("iteration", sa.Integer, primary_key=True),
        sa.Column("executing_seq", sa.Integer, nullable=False),
        sa.Column("validating_seq", sa.Integer, nullable=False),
        sa.Column("deciding_seq", sa.Integer, nullable=False),
        sa.Column("decided_seq", sa.Integer, nullable=False),
        sa.Column("signal", sa.String(20), nullable=False),
        sa.Column("score", sa.Float, nullable=False),
        sa.Column("passed", sa.Boolean, nullable=False),
        sa.Column("terminal_reason", sa.String(40), nullable=True),
        sa.Column("decision", sa.Text, nullable=False),
        sa.Column("decided_at", sa.Float, nullable=False),
    )
    op.create_table(
        "lw_hooks",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("task_id", sa.String(200), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("ref", sa.Text, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("meta", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_lw_hooks_task_id", "lw_hooks", ["task_id"])
    meta = op.create_table(
        "lw_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(200), nullable=False),
    )
    op.bulk_insert(meta, [{"key": "schema_version", "value": str(SCHEMA_VERSION)}])


def downgrade() -> None:
    raise NotImplementedError("loopwarden schema migrations are forward-only")
