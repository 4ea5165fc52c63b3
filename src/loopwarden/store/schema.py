"""The tables, as SQLModel classes. Times are UNIX seconds (floats); JSON is stored as text.

``lw_loops``        one row per loop: its current state and the lease of its owner (no index
                    on ``state``: it changes on every transition, and an index would be
                    rewritten each time)
``lw_checkpoints``  one immutable row per state entry; ``(loop_id, seq)`` is the key, so a
                    retried write can never record a state entry twice
``lw_iterations``   one append-only row per decided iteration, pointing at its checkpoints
``lw_hooks``        stop hooks and completion validators registered per task
``lw_meta``         the schema version
"""

from __future__ import annotations

from sqlalchemy import Column, Text
from sqlmodel import Field, SQLModel

__all__ = [
    "SCHEMA_VERSION",
    "CheckpointRow",
    "HookRow",
    "IterationRow",
    "LoopRow",
    "MetaRow",
    "metadata",
]

SCHEMA_VERSION = 1


class LoopRow(SQLModel, table=True):
    __tablename__ = "lw_loops"
    id: str = Field(primary_key=True, max_length=64)
    task_id: str = Field(index=True, max_length=200)
    parent_id: str | None = Field(default=None, max_length=64)
    state: str = Field(max_length=20)
    iteration: int
    last_decided: int
    max_iterations: int
    seq: int
    config: str = Field(sa_column=Column(Text, nullable=False))
    prompt: str = Field(sa_column=Column(Text, nullable=False))
    current_prompt: str = Field(sa_column=Column(Text, nullable=False))
    context: str = Field(sa_column=Column(Text, nullable=False))
    consecutive_failures: int
    stop_retries: int
    scores: str = Field(sa_column=Column(Text, nullable=False))
    terminal_reason: str | None = Field(default=None, max_length=40)
    reason: str = Field(sa_column=Column(Text, nullable=False))
    meta: str = Field(sa_column=Column(Text, nullable=False))
    created_at: float
    updated_at: float
    lease_owner: str | None = Field(default=None, max_length=200)
    lease_epoch: int
    lease_expires: float
    lease_pid: int | None = None
    lease_host: str | None = Field(default=None, max_length=255)


class CheckpointRow(SQLModel, table=True):
    __tablename__ = "lw_checkpoints"

    loop_id: str = Field(primary_key=True, max_length=64)
    seq: int = Field(primary_key=True)
    state: str = Field(max_length=20)
    iteration: int
    trigger: str = Field(max_length=20)
    schema_version: int
    created_at: float
    owner: str = Field(max_length=200)
    data: str = Field(sa_column=Column(Text, nullable=False))


class IterationRow(SQLModel, table=True):
    __tablename__ = "lw_iterations"

    loop_id: str = Field(primary_key=True, max_length=64)
    iteration: int = Field(primary_key=True)
    executing_seq: int
    validating_seq: int
    deciding_seq: int
    decided_seq: int
    signal: str = Field(max_length=20)
    score: float
    passed: bool
    terminal_reason: str | None = Field(default=None, max_length=40)
    decision: str = Field(sa_column=Column(Text, nullable=False))
    decided_at: float


class HookRow(SQLModel, table=True):
    """A stop hook or completion validator registered for a task, in registration order."""

    __tablename__ = "lw_hooks"

    id: str = Field(primary_key=True, max_length=64)
    task_id: str = Field(index=True, max_length=200)
    position: int
    kind: str = Field(max_length=20)
    ref: str = Field(sa_column=Column(Text, nullable=False))
    enabled: bool
    meta: str = Field(sa_column=Column(Text, nullable=False))
    created_at: float


class MetaRow(SQLModel, table=True):
    __tablename__ = "lw_meta"

    key: str = Field(primary_key=True, max_length=64)
    value: str = Field(max_length=200)


metadata = SQLModel.metadata
