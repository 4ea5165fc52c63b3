"""Every SQL statement loopwarden runs, written once in SQLAlchemy Core.

The statements are compiled once per database (see ``database.Prepared``) and executed on the
driver connection, so the driver keeps them prepared; SQLite and PostgreSQL run the same text
modulo parameter style.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Float,
    Integer,
    String,
    and_,
    bindparam,
    delete,
    insert,
    literal_column,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.sql import ClauseElement

from loopwarden.store.schema import metadata

loops = metadata.tables["lw_loops"]
checkpoints = metadata.tables["lw_checkpoints"]
iterations = metadata.tables["lw_iterations"]
meta = metadata.tables["lw_meta"]
hooks = metadata.tables["lw_hooks"]

# Columns a transition may change; the rest are fixed at creation.
MUTABLE = (
    "state",
    "iteration",
    "last_decided",
    "max_iterations",
    "seq",
    "config",
    "current_prompt",
    "context",
    "consecutive_failures",
    "stop_retries",
    "scores",
    "terminal_reason",
    "reason",
    "meta",
    "updated_at",
    "lease_expires",
)

insert_loop = insert(loops)

# The fenced write: it applies only while we still hold the lease at the epoch we took it with,
# and only on top of the checkpoint we last saw.
update_loop = (
    update(loops)
    .where(
        loops.c.id == bindparam("id_"),
        loops.c.lease_owner == bindparam("owner_"),
        loops.c.lease_epoch == bindparam("epoch_"),
        loops.c.seq == bindparam("old_seq_"),
    )
    .values({name: bindparam(name) for name in MUTABLE})
)

insert_checkpoint = insert(checkpoints)
insert_iteration = insert(iterations)

select_loop = select(loops).where(loops.c.id == bindparam("id"))

acquire_lease = (
    update(loops)
    .where(loops.c.id == bindparam("id_"), loops.c.lease_epoch == bindparam("seen_epoch"))
    .values(
        lease_owner=bindparam("owner"),
        lease_epoch=loops.c.lease_epoch + literal_column("1"),
        lease_expires=bindparam("expires"),
        lease_pid=bindparam("pid"),
        lease_host=bindparam("host"),
    )
)

renew_lease = (
    update(loops)
    .where(
        loops.c.id == bindparam("id_"),
        loops.c.lease_owner == bindparam("owner"),
        loops.c.lease_epoch == bindparam("epoch"),
    )
    .values(lease_expires=bindparam("expires"))
)

release_lease = (
    update(loops)
    .where(
        loops.c.id == bindparam("id_"),
        loops.c.lease_owner == bindparam("owner"),
        loops.c.lease_epoch == bindparam("epoch"),
    )
    .values(
        lease_owner=null(), lease_expires=literal_column("0"), lease_pid=null(), lease_host=null()
    )
)

_state = bindparam("state", type_=String)
_task = bindparam("task_id", type_=String)
list_loops = (
    select(loops)
    .where(
        or_(_state.is_(None), loops.c.state == _state),
        or_(_task.is_(None), loops.c.task_id == _task),
    )
    .order_by(loops.c.created_at, loops.c.id)
    .limit(bindparam("limit", type_=BigInteger))
    .offset(bindparam("offset", type_=BigInteger))
)

select_checkpoint = select(checkpoints).where(
    checkpoints.c.loop_id == bindparam("loop_id"), checkpoints.c.seq == bindparam("seq")
)

list_checkpoints = (
    select(checkpoints)
    .where(checkpoints.c.loop_id == bindparam("loop_id"))
    .order_by(checkpoints.c.seq)
)

last_iteration = select(iterations).where(
    iterations.c.loop_id == bindparam("loop_id"),
    iterations.c.iteration == bindparam("iteration"),
)

_exec = checkpoints.alias("exec_cp")
_valid = checkpoints.alias("valid_cp")
_decid = checkpoints.alias("decid_cp")
history = (
    select(
        iterations.c.iteration,
        iterations.c.decision,
        iterations.c.decided_at,
        _exec.c.data.label("executing_data"),
        _exec.c.created_at.label("started_at"),
        _valid.c.data.label("validating_data"),
        _valid.c.created_at.label("submitted_at"),
        _decid.c.data.label("deciding_data"),
    )
    .select_from(
        iterations.outerjoin(
            _exec,
            and_(
                _exec.c.loop_id == iterations.c.loop_id, _exec.c.seq == iterations.c.executing_seq
            ),
        )
        .outerjoin(
            _valid,
            and_(
                _valid.c.loop_id == iterations.c.loop_id,
                _valid.c.seq == iterations.c.validating_seq,
            ),
        )
        .outerjoin(
            _decid,
            and_(
                _decid.c.loop_id == iterations.c.loop_id,
                _decid.c.seq == iterations.c.deciding_seq,
            ),
        )
    )
    .where(
        iterations.c.loop_id == bindparam("loop_id"),
        iterations.c.iteration >= bindparam("first", type_=Integer),
    )
    .order_by(iterations.c.iteration)
    .limit(bindparam("limit", type_=BigInteger))
    .offset(bindparam("offset", type_=BigInteger))
)

insert_hook = insert(hooks)
task_hooks = select(hooks).where(hooks.c.task_id == bindparam("task_id")).order_by(hooks.c.position)
select_hook = select(hooks).where(hooks.c.id == bindparam("id"))
set_hook_enabled = (
    update(hooks).where(hooks.c.id == bindparam("id_")).values(enabled=bindparam("enabled"))
)
delete_task_hooks = delete(hooks).where(hooks.c.task_id == bindparam("task_id"))

loop_iterations = (
    select(iterations)
    .where(iterations.c.loop_id == bindparam("loop_id"))
    .order_by(iterations.c.iteration)
)

_TERMINAL = ("completed", "blocked", "escalated")

# Retention: finished loops last touched before a cutoff, and their older checkpoints.
prunable_loops = (
    select(loops.c.id)
    .where(
        loops.c.state.in_([literal_column(f"'{s}'") for s in _TERMINAL]),
        loops.c.updated_at < bindparam("cutoff", type_=Float),
    )
    .order_by(loops.c.updated_at)
)
delete_checkpoints_below = delete(checkpoints).where(
    checkpoints.c.loop_id == bindparam("loop_id"), checkpoints.c.seq < bindparam("below")
)

# Workers: loops whose next step is engine work (validating or deciding, or waiting for an
# agent command that the loop's metadata stores) and whose lease is free or expired, oldest
# first. SKIP LOCKED lets concurrent PostgreSQL workers claim different loops without waiting
# on each other; SQLite ignores FOR UPDATE, and its IMMEDIATE transactions serialise claims.
claim_loops = (
    select(loops.c.id, loops.c.state, loops.c.lease_epoch, loops.c.meta)
    .where(
        or_(
            loops.c.state.in_([literal_column("'validating'"), literal_column("'deciding'")]),
            and_(
                loops.c.state.in_([literal_column("'initialized'"), literal_column("'executing'")]),
                loops.c.meta.like(bindparam("agent_marker", type_=String)),
            ),
        ),
        loops.c.lease_expires < bindparam("now", type_=Float),
    )
    .order_by(loops.c.updated_at, loops.c.id)
    .limit(bindparam("limit", type_=BigInteger))
    .offset(bindparam("offset", type_=BigInteger))
    .with_for_update(skip_locked=True)
)

get_meta = select(meta.c.value).where(meta.c.key == bindparam("key"))
put_meta = insert(meta)

ALL: dict[str, ClauseElement] = {
    name: stmt
    for name, stmt in globals().items()
    if isinstance(stmt, ClauseElement) and not name.startswith("_")
}

__all__ = ["ALL", "MUTABLE"]
