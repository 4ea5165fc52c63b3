"""Every error loopwarden raises derives from one root, so callers can catch it whole.

LoopwardenError
├── ConfigError                 a configuration value is invalid (names the field)
├── LoopNotFoundError           no loop with that id in this database
├── InvalidTransitionError      the trigger is not allowed in the loop's current state
├── UnresolvedReferenceError    a stored name (predicate rule, hook) is not registered here
├── LeaseError                  the loop is owned by someone else
│   ├── LeaseHeldError          another live owner holds the lease; nothing was written
│   └── StaleOwnerError         our lease was taken over; the write was rejected
└── StoreError                  the database cannot be used as asked
    ├── CorruptRecordError      a stored row cannot be decoded (bad JSON, unknown state)
    └── SchemaVersionError      the database was written by a newer loopwarden

Messages say what was wrong and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CorruptRecordError",
    "InvalidTransitionError",
    "LeaseError",
    "LeaseHeldError",
    "LoopNotFoundError",
    "LoopwardenError",
    "SchemaVersionError",
    "StaleOwnerError",
    "StoreError",
    "UnresolvedReferenceError",
]


class LoopwardenError(Exception):
    """The root of every error loopwarden raises."""


class ConfigError(LoopwardenError, ValueError):
    """A configuration value is invalid; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.detail = message
        super().__init__(f"{field}: {message}")


class LoopNotFoundError(LoopwardenError, LookupError):
    """No loop with the given id exists in this database."""

    def __init__(self, loop_id: str) -> None:
        self.loop_id = loop_id
        super().__init__(
            f"no loop with id {loop_id!r} in this database; "
            "list the loops with engine.list() or `loopwarden list`"
        )


class InvalidTransitionError(LoopwardenError):
    """The trigger is not allowed from the loop's current state."""

    def __init__(self, loop_id: str, state: str, trigger: str, hint: str = "") -> None:
        self.loop_id = loop_id
        self.state = state
        self.trigger = trigger
        message = f"loop {loop_id} is {state}; {trigger!r} is not allowed in that state"
        super().__init__(f"{message}. {hint}" if hint else message)


class UnresolvedReferenceError(LoopwardenError, LookupError):
    """A name stored with a loop (a predicate rule, a hook) is not registered in this process."""


class LeaseError(LoopwardenError):
    """The loop is owned by another driver."""


class LeaseHeldError(LeaseError):
    """Another live owner holds the loop's lease; nothing was written."""


class StaleOwnerError(LeaseError):
    """This owner's lease was taken over by another; its write was rejected and nothing changed."""


class StoreError(LoopwardenError):
    """The database cannot be used as asked."""


class CorruptRecordError(StoreError):
    """A stored row cannot be decoded."""


class SchemaVersionError(StoreError):
    """The database was written by a newer schema version than this loopwarden knows."""
