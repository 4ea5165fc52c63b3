"""The loop's state machine, declared once as a table and shared by every loop.

One ``transitions.Machine`` is built at import. Loops are not models on it (``add_model``
scans every model already added, and a Machine costs hundreds of microseconds to build):
each thread has one small cursor model, set to a loop's stored state, stepped, and read back.
The guards are the transitions' conditions: ``decide`` routes on the signal that the pure
``decide()`` function computed from the stored evidence, and ``reopen`` needs iterations left.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from transitions import EventData, Machine, MachineError

from loopwarden.errors import InvalidTransitionError
from loopwarden.model import TERMINAL_STATES, Decision, Signal, State

__all__ = ["MACHINE", "TRANSITIONS", "TRIGGERS", "allowed_triggers", "step"]


def _signal_is(signal: Signal) -> Callable[[EventData], bool]:
    def condition(event: EventData) -> bool:
        decision: Decision = event.kwargs["decision"]
        return decision.signal is signal

    condition.__name__ = f"signal_is_{signal.value.lower()}"
    return condition


def has_iterations_left(event: EventData) -> bool:
    """``reopen`` needs the next iteration to be within max_iterations."""
    return bool(event.kwargs["next_iteration"] <= event.kwargs["max_iterations"])


_LIVE = [s.value for s in State if not s.terminal]

TRANSITIONS: list[dict[str, Any]] = [
    {"trigger": "start", "source": State.INITIALIZED.value, "dest": State.EXECUTING.value},
    {"trigger": "submit", "source": State.EXECUTING.value, "dest": State.VALIDATING.value},
    {"trigger": "evaluate", "source": State.VALIDATING.value, "dest": State.DECIDING.value},
    # CONTINUE first: transitions tries a trigger's transitions in order, and it is the
    # common case.
    {
        "trigger": "decide",
        "source": State.DECIDING.value,
        "dest": State.EXECUTING.value,
        "conditions": [_signal_is(Signal.CONTINUE)],
    },
    {
        "trigger": "decide",
        "source": State.DECIDING.value,
        "dest": State.COMPLETED.value,
        "conditions": [_signal_is(Signal.COMPLETE)],
    },
    {
        "trigger": "decide",
        "source": State.DECIDING.value,
        "dest": State.BLOCKED.value,
        "conditions": [_signal_is(Signal.BLOCKED)],
    },
    {
        "trigger": "decide",
        "source": State.DECIDING.value,
        "dest": State.ESCALATED.value,
        "conditions": [_signal_is(Signal.ESCALATE)],
    },
    {"trigger": "block", "source": _LIVE, "dest": State.BLOCKED.value},
    {
        "trigger": "reopen",
        "source": [State.BLOCKED.value, State.ESCALATED.value],
        "dest": State.EXECUTING.value,
        "conditions": [has_iterations_left],
    },
]

TRIGGERS = ("start", "submit", "evaluate", "decide", "block", "reopen")

MACHINE = Machine(
    model=None,
    states=[s.value for s in State],
    transitions=TRANSITIONS,
    initial=State.INITIALIZED.value,
    auto_transitions=False,
    send_event=True,
    ignore_invalid_triggers=False,
    name="loopwarden",
)


class _Cursor:
    """The one model a thread steps; it holds no loop between calls."""

    state: str


_local = threading.local()


def _cursor() -> _Cursor:
    cursor: _Cursor | None = getattr(_local, "cursor", None)
    if cursor is None:
        cursor = _Cursor()
        MACHINE.add_model(cursor)
        _local.cursor = cursor
    return cursor


def allowed_triggers(state: State) -> list[str]:
    """The triggers the machine accepts from ``state`` (none from a terminal state)."""
    return [t for t in TRIGGERS if t in MACHINE.get_triggers(state.value)]


def _hint(state: State, trigger: str) -> str:
    if state in TERMINAL_STATES:
        if state is State.COMPLETED:
            return "completed is terminal and accepts no trigger; start a new loop for new work"
        return f"{state.value} is terminal; only reopen (with iterations left) moves it on"
    allowed = ", ".join(allowed_triggers(state)) or "none"
    return f"allowed from {state.value}: {allowed}"


def step(loop_id: str, state: State, trigger: str, **kwargs: Any) -> State:
    """The state ``trigger`` moves a loop to from ``state``; InvalidTransitionError if none."""
    cursor = _cursor()
    cursor.state = state.value
    event = MACHINE.events.get(trigger)
    try:
        if event is None:
            raise MachineError(f"unknown trigger {trigger!r}")
        moved = event.trigger(cursor, **kwargs)
    except MachineError:
        raise InvalidTransitionError(loop_id, state.value, trigger, _hint(state, trigger)) from None
    if not moved:
        raise InvalidTransitionError(
            loop_id, state.value, trigger, "its guard condition does not hold"
        )
    return State(cursor.state)
