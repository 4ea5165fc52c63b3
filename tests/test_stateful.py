"""A hypothesis state machine drives random outputs and rule results through the engine.

It runs several loops on a real SQLite file, with submits, simulated crashes, resumes, blocks,
reopens, budget changes and engine restarts, and checks each step against a small model of
DESIGN §2 plus the invariants of the store: only the machine's transitions, one checkpoint per
state entry, terminal states absorb, contiguous iterations, never more than max_iterations.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from _driver import SimulatedCrash
from loopwarden import (
    ConfigError,
    InvalidTransitionError,
    LoopConfig,
    LoopEngine,
    Signal,
    State,
    TerminalReason,
    machine,
    rules,
)

# The rule's result for the next validation, set by the state machine before each step.
_VERDICT = {"pass": True, "crash": False}


def _controlled(submission: rules.Submission) -> tuple[bool, str]:
    del submission
    if _VERDICT["crash"]:
        raise SimulatedCrash("simulated crash while validating")
    return _VERDICT["pass"], "controlled by the state machine"


CONTROLLED = rules.predicate("stateful-verdict", _controlled)

# Agent outputs by what they promise; the fenced and commented ones only talk about a promise.
OUTPUTS = {
    "plain": (None, "did some work"),
    "complete": ("complete", "all done <promise>COMPLETE</promise>"),
    "blocked": ("blocked", "<promise>BLOCKED: no access</promise>"),
    "escalate": ("escalate", "<promise>escalate</promise> please look"),
    "blocked+complete": ("blocked", "<promise>COMPLETE</promise>\n<promise>BLOCKED</promise>"),
    "complete+blocked, one line": (
        "blocked",
        "<promise>COMPLETE</promise> <promise>BLOCKED</promise>",
    ),
    "fenced": (None, "```\n<promise>COMPLETE</promise>\n```"),
    "comment": (None, "<!-- <promise>COMPLETE</promise> -->"),
}

EDGES = {
    (source, t["trigger"], t["dest"])
    for t in machine.TRANSITIONS
    for source in ([t["source"]] if isinstance(t["source"], str) else t["source"])
}


@dataclass
class Model:
    """What the engine should have stored for one loop."""

    state: State
    iteration: int
    max_iterations: int
    threshold: int
    last_decided: int = 0
    failures: int = 0
    seq: int = 1
    pending: str | None = None  # the output kind stored in validating, awaiting a decision

    def expect(self, kind: str | None, passed: bool) -> tuple[Signal, TerminalReason | None]:
        """DESIGN §2 for one rule whose score is 0 or 100 (so regression cannot fire)."""
        failures = 0 if passed else self.failures + 1
        if kind == "blocked":
            return Signal.BLOCKED, TerminalReason.BLOCKED_BY_AGENT
        if kind == "escalate":
            return Signal.ESCALATE, TerminalReason.ESCALATED_BY_AGENT
        if kind == "complete" and passed:
            return Signal.COMPLETE, TerminalReason.COMPLETED
        if failures >= self.threshold:
            return Signal.ESCALATE, TerminalReason.CIRCUIT_BREAKER
        if self.iteration >= self.max_iterations:
            return Signal.ESCALATE, TerminalReason.MAX_ITERATIONS
        return Signal.CONTINUE, None

    def decided(self, signal: Signal, passed: bool) -> None:
        self.failures = 0 if passed else self.failures + 1
        self.last_decided = self.iteration
        self.pending = None
        self.seq += 2  # evaluate → deciding, decide → next state
        if signal is Signal.CONTINUE:
            self.iteration += 1
            self.state = State.EXECUTING
        else:
            self.state = {
                Signal.COMPLETE: State.COMPLETED,
                Signal.BLOCKED: State.BLOCKED,
                Signal.ESCALATE: State.ESCALATED,
            }[signal]


class LoopMachine(RuleBasedStateMachine):
    """Random operations on random loops keep the engine's record consistent."""

    loops = Bundle("loops")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="loopwarden-stateful-"))
        self.url = f"sqlite:///{self.dir / 'loops.db'}"
        self.engine = LoopEngine(self.url)
        self.models: dict[str, Model] = {}
        self.steps_since_restart = 0

    def teardown(self) -> None:
        _VERDICT.update({"pass": True, "crash": False})
        self.engine.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ----- operations --------------------------------------------------------------------

    @rule(
        target=loops,
        max_iterations=st.integers(1, 6),
        threshold=st.integers(1, 4),
        started=st.booleans(),
    )
    def new_loop(self, max_iterations: int, threshold: int, started: bool) -> str:
        cfg = LoopConfig(
            max_iterations=max_iterations, circuit_breaker_threshold=threshold, rules=[CONTROLLED]
        )
        make = self.engine.start if started else self.engine.create
        snap = make("stateful", cfg, prompt="do the task")
        state = State.EXECUTING if started else State.INITIALIZED
        self.models[snap.id] = Model(
            state, int(started), max_iterations, threshold, seq=1 + int(started)
        )
        return snap.id

    @rule(loop=loops, output=st.sampled_from(sorted(OUTPUTS)), passed=st.booleans())
    def submit(self, loop: str, output: str, passed: bool) -> None:
        model = self.models[loop]
        kind, text = OUTPUTS[output]
        _VERDICT["pass"] = passed
        if model.state is not State.EXECUTING:
            with pytest.raises(InvalidTransitionError):
                self.engine.submit(loop, text)
            return
        expected = model.expect(kind, passed)
        decision = self.engine.submit(loop, text)
        assert decision.iteration == model.iteration
        assert (decision.signal, decision.terminal_reason) == expected
        model.seq += 1
        model.decided(decision.signal, passed)

    @rule(loop=loops, output=st.sampled_from(sorted(OUTPUTS)))
    def crash_while_validating(self, loop: str, output: str) -> None:
        model = self.models[loop]
        if model.state is not State.EXECUTING:
            return
        _VERDICT["crash"] = True
        try:
            with pytest.raises(SimulatedCrash):
                self.engine.submit(loop, OUTPUTS[output][1])
        finally:
            _VERDICT["crash"] = False
        model.state, model.pending = State.VALIDATING, output
        model.seq += 1

    @rule(loop=loops, passed=st.booleans())
    def resume(self, loop: str, passed: bool) -> None:
        model = self.models[loop]
        _VERDICT["pass"] = passed
        if model.state is State.VALIDATING:
            assert model.pending is not None
            expected = model.expect(OUTPUTS[model.pending][0], passed)
        snap = self.engine.resume(loop)
        if model.state is State.INITIALIZED:
            model.state, model.iteration = State.EXECUTING, 1
            model.seq += 1
        elif model.state is State.VALIDATING:
            assert snap.last_decision is not None
            decision = snap.last_decision
            assert (decision.iteration, decision.signal, decision.terminal_reason) == (
                model.iteration,
                *expected,
            )
            model.decided(decision.signal, passed)
        assert snap.state is model.state

    @rule(loop=loops, reason=st.sampled_from(["stop", "", "needs a human"]))
    def block(self, loop: str, reason: str) -> None:
        model = self.models[loop]
        if model.state.terminal:
            with pytest.raises(InvalidTransitionError):
                self.engine.block(loop, reason)
            return
        snap = self.engine.block(loop, reason)
        assert (snap.state, snap.terminal_reason) == (State.BLOCKED, TerminalReason.BLOCKED_BY_USER)
        model.state, model.pending = State.BLOCKED, None
        model.seq += 1

    @rule(loop=loops, extra=st.integers(0, 3), note=st.sampled_from([None, "try again"]))
    def reopen(self, loop: str, extra: int, note: str | None) -> None:
        model = self.models[loop]
        allowed = model.state in (State.BLOCKED, State.ESCALATED)
        if not allowed or model.last_decided + 1 > model.max_iterations + extra:
            with pytest.raises(InvalidTransitionError):
                self.engine.reopen(loop, extra_iterations=extra, note=note)
            return
        snap = self.engine.reopen(loop, extra_iterations=extra, note=note)
        model.state, model.iteration = State.EXECUTING, model.last_decided + 1
        model.max_iterations += extra
        model.failures = 0
        model.seq += 1
        assert (snap.state, snap.iteration) == (State.EXECUTING, model.iteration)
        if note:
            assert note in snap.current_prompt

    @rule(loop=loops, limit=st.integers(1, 8))
    def set_max_iterations(self, loop: str, limit: int) -> None:
        model = self.models[loop]
        if model.state.terminal:
            with pytest.raises(InvalidTransitionError):
                self.engine.set_max_iterations(loop, limit)
        elif limit < max(model.iteration, 1):
            with pytest.raises(ConfigError):
                self.engine.set_max_iterations(loop, limit)
        else:
            assert self.engine.set_max_iterations(loop, limit).max_iterations == limit
            model.max_iterations = limit

    # Opening an engine costs far more than a step: restart after a few steps, not any time.
    @precondition(lambda self: self.steps_since_restart >= 4)
    @rule()
    def restart(self) -> None:
        self.engine.close()
        self.engine = LoopEngine(self.url)
        self.steps_since_restart = 0

    # ----- invariants --------------------------------------------------------------------

    @invariant()
    def matches_the_model(self) -> None:
        self.steps_since_restart += 1
        for loop_id, model in self.models.items():
            snap = self.engine.get(loop_id)
            assert (snap.state, snap.iteration, snap.max_iterations, snap.seq) == (
                model.state,
                model.iteration,
                model.max_iterations,
                model.seq,
            )

    @invariant()
    def one_checkpoint_per_state_entry_along_machine_edges(self) -> None:
        for loop_id, model in self.models.items():
            cps = self.engine.checkpoints(loop_id)
            assert [c.seq for c in cps] == list(range(1, model.seq + 1))
            assert (cps[0].state, cps[0].trigger) == (State.INITIALIZED, "create")
            for before, after in itertools.pairwise(cps):
                edge = (before.state.value, after.trigger, after.state.value)
                assert edge in EDGES, f"{edge} is not a transition of the machine"

    @invariant()
    def iterations_are_contiguous_and_within_the_budget(self) -> None:
        for loop_id, model in self.models.items():
            history = self.engine.history(loop_id)
            assert [r.iteration for r in history] == list(range(1, model.last_decided + 1))
            assert len(history) <= model.max_iterations


LoopMachine.TestCase.settings = settings(stateful_step_count=30)


class TestLoopMachine(LoopMachine.TestCase):  # type: ignore[misc,valid-type]
    """Any sequence of operations keeps the record consistent with the machine and the model."""
