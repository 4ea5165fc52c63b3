"""The state machine: one table of allowed transitions, shared by every loop."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from loopwarden import Decision, InvalidTransitionError, LoopwardenError, Signal, State
from loopwarden.errors import CorruptRecordError
from loopwarden.machine import MACHINE, TRANSITIONS, TRIGGERS, allowed_triggers, step

LIVE = [State.INITIALIZED, State.EXECUTING, State.VALIDATING, State.DECIDING]
TERMINAL = [State.COMPLETED, State.BLOCKED, State.ESCALATED]

# DESIGN §1: (trigger, from, to) for every allowed transition, and nothing else.
DESIGN_TABLE = {
    ("start", "initialized", "executing"),
    ("submit", "executing", "validating"),
    ("evaluate", "validating", "deciding"),
    ("decide", "deciding", "completed"),
    ("decide", "deciding", "blocked"),
    ("decide", "deciding", "escalated"),
    ("decide", "deciding", "executing"),
    *(("block", s.value, "blocked") for s in LIVE),
    ("reopen", "blocked", "executing"),
    ("reopen", "escalated", "executing"),
}

SIGNAL_DEST = {
    Signal.COMPLETE: State.COMPLETED,
    Signal.BLOCKED: State.BLOCKED,
    Signal.ESCALATE: State.ESCALATED,
    Signal.CONTINUE: State.EXECUTING,
}


def decision(signal: Signal) -> Decision:
    return Decision(signal, SIGNAL_DEST[signal], 1, 100.0, "test")


def kwargs_for(trigger: str) -> dict[str, Any]:
    """Arguments that satisfy the trigger's conditions when it is allowed at all."""
    if trigger == "decide":
        return {"decision": decision(Signal.CONTINUE)}
    if trigger == "reopen":
        return {"next_iteration": 2, "max_iterations": 10}
    return {}


def table_rows() -> set[tuple[str, str, str]]:
    rows = set()
    for t in TRANSITIONS:
        sources = t["source"] if isinstance(t["source"], list) else [t["source"]]
        rows |= {(t["trigger"], s, t["dest"]) for s in sources}
    return rows


class TestTable:
    def test_transitions_match_the_design(self) -> None:
        """The declared transitions are exactly DESIGN §1's table."""
        assert table_rows() == DESIGN_TABLE

    def test_machine_has_every_state_and_trigger(self) -> None:
        """The shared machine knows every state and only the six triggers."""
        assert set(MACHINE.states) == {s.value for s in State}
        assert set(MACHINE.events) == set(TRIGGERS)
        assert TRIGGERS == ("start", "submit", "evaluate", "decide", "block", "reopen")

    def test_no_auto_transitions(self) -> None:
        """No to_<state> shortcuts exist: every move goes through a trigger."""
        assert not any(name.startswith("to_") for name in MACHINE.events)

    @pytest.mark.parametrize("state", list(State))
    @pytest.mark.parametrize("trigger", TRIGGERS)
    def test_only_table_transitions_step(self, state: State, trigger: str) -> None:
        """A trigger moves a state iff the table allows it."""
        allowed = {(t, s) for t, s, _ in DESIGN_TABLE}
        if (trigger, state.value) in allowed:
            dest = step("L", state, trigger, **kwargs_for(trigger))
            assert (trigger, state.value, dest.value) in DESIGN_TABLE
        else:
            with pytest.raises(InvalidTransitionError):
                step("L", state, trigger, **kwargs_for(trigger))

    def test_allowed_triggers(self) -> None:
        """allowed_triggers lists what each state accepts, in TRIGGERS order."""
        assert allowed_triggers(State.INITIALIZED) == ["start", "block"]
        assert allowed_triggers(State.EXECUTING) == ["submit", "block"]
        assert allowed_triggers(State.VALIDATING) == ["evaluate", "block"]
        assert allowed_triggers(State.DECIDING) == ["decide", "block"]
        assert allowed_triggers(State.COMPLETED) == []
        assert allowed_triggers(State.BLOCKED) == ["reopen"]
        assert allowed_triggers(State.ESCALATED) == ["reopen"]


class TestNormalPass:
    def test_one_iteration_then_continue(self) -> None:
        """start, submit, evaluate, decide(CONTINUE) returns to executing."""
        state = State.INITIALIZED
        for trigger in ("start", "submit", "evaluate"):
            state = step("L", state, trigger)
        assert state is State.DECIDING
        assert step("L", state, "decide", decision=decision(Signal.CONTINUE)) is State.EXECUTING

    @pytest.mark.parametrize("signal", list(Signal))
    def test_decide_routes_on_the_signal(self, signal: Signal) -> None:
        """decide goes where the decision's signal says."""
        assert (
            step("L", State.DECIDING, "decide", decision=decision(signal)) is (SIGNAL_DEST[signal])
        )


class TestTerminalStates:
    @pytest.mark.parametrize("trigger", [t for t in TRIGGERS if t != "reopen"])
    @pytest.mark.parametrize("state", TERMINAL)
    def test_terminal_states_accept_no_trigger(self, state: State, trigger: str) -> None:
        """A terminal state refuses every trigger but reopen, with a clear error."""
        with pytest.raises(InvalidTransitionError) as info:
            step("loop-1", state, trigger, **kwargs_for(trigger))
        err = info.value
        assert (err.loop_id, err.state, err.trigger) == ("loop-1", state.value, trigger)
        message = str(err)
        assert f"loop loop-1 is {state.value}" in message
        assert f"{trigger!r} is not allowed" in message
        assert "terminal" in message

    def test_completed_refuses_reopen(self) -> None:
        """completed cannot be reopened; the message says to start a new loop."""
        with pytest.raises(InvalidTransitionError, match="start a new loop"):
            step("L", State.COMPLETED, "reopen", next_iteration=2, max_iterations=10)

    def test_blocked_and_escalated_hint_at_reopen(self) -> None:
        """The error from blocked or escalated says that only reopen moves it on."""
        with pytest.raises(InvalidTransitionError, match="only reopen"):
            step("L", State.ESCALATED, "submit")

    def test_error_is_a_loopwarden_error(self) -> None:
        """InvalidTransitionError derives from the root error."""
        with pytest.raises(LoopwardenError):
            step("L", State.COMPLETED, "start")


class TestBlock:
    @pytest.mark.parametrize("state", LIVE)
    def test_block_from_every_live_state(self, state: State) -> None:
        """A human can block a loop from any non-terminal state."""
        assert step("L", state, "block") is State.BLOCKED

    @pytest.mark.parametrize("state", TERMINAL)
    def test_block_from_terminal_states_is_refused(self, state: State) -> None:
        """Blocking a finished loop is an invalid transition."""
        with pytest.raises(InvalidTransitionError):
            step("L", state, "block")


class TestReopen:
    @pytest.mark.parametrize("state", [State.BLOCKED, State.ESCALATED])
    def test_reopen_with_iterations_left(self, state: State) -> None:
        """blocked and escalated reopen to executing when iterations are left."""
        assert step("L", state, "reopen", next_iteration=5, max_iterations=5) is State.EXECUTING

    @pytest.mark.parametrize("state", [State.BLOCKED, State.ESCALATED])
    def test_reopen_without_iterations_left_is_refused(self, state: State) -> None:
        """reopen past max_iterations fails its guard with a clear error."""
        with pytest.raises(InvalidTransitionError, match="guard condition"):
            step("L", state, "reopen", next_iteration=6, max_iterations=5)

    @pytest.mark.parametrize("state", LIVE)
    def test_reopen_only_from_blocked_or_escalated(self, state: State) -> None:
        """A live loop cannot be reopened."""
        with pytest.raises(InvalidTransitionError, match="allowed from"):
            step("L", state, "reopen", next_iteration=2, max_iterations=10)


class TestRobustness:
    def test_unknown_trigger(self) -> None:
        """An unknown trigger is an InvalidTransitionError, not an AttributeError."""
        with pytest.raises(InvalidTransitionError, match="'jump'"):
            step("L", State.EXECUTING, "jump")

    def test_unknown_state_name_is_loud(self) -> None:
        """A stored state name that is not a state names the valid ones."""
        with pytest.raises(CorruptRecordError, match="valid states are initialized"):
            State.parse("running")
        assert State.parse("deciding") is State.DECIDING

    def test_steps_do_not_leak_between_calls(self) -> None:
        """Each step starts from the state given, whatever the previous step left."""
        assert step("A", State.INITIALIZED, "start") is State.EXECUTING
        assert step("B", State.DECIDING, "block") is State.BLOCKED
        assert step("C", State.INITIALIZED, "start") is State.EXECUTING

    def test_machine_is_shared_and_models_do_not_grow(self) -> None:
        """Stepping many loops does not add a model per loop to the shared machine."""
        step("warm", State.INITIALIZED, "start")
        before = len(MACHINE.models)
        for i in range(200):
            step(f"loop-{i}", State.INITIALIZED, "start")
        assert len(MACHINE.models) == before

    def test_threads_step_independently(self) -> None:
        """Concurrent steps in several threads each get their own answer."""
        errors: list[BaseException] = []

        def worker(state: State, trigger: str, expected: State) -> None:
            try:
                for _ in range(200):
                    assert step("T", state, trigger) is expected
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [
            threading.Thread(target=worker, args=(State.INITIALIZED, "start", State.EXECUTING)),
            threading.Thread(target=worker, args=(State.EXECUTING, "submit", State.VALIDATING)),
            threading.Thread(target=worker, args=(State.VALIDATING, "evaluate", State.DECIDING)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []

    def test_terminal_property(self) -> None:
        """Exactly completed, blocked and escalated are terminal."""
        assert [s for s in State if s.terminal] == TERMINAL
