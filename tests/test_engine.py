"""The engine's public API, as specifications: start, submit, decide, history, manual control."""

from __future__ import annotations

import itertools
import json
import re
import time

import pytest

from _driver import leave_in
from loopwarden import (
    ConfigError,
    Decision,
    InvalidTransitionError,
    LoopConfig,
    LoopEngine,
    Signal,
    State,
    TerminalReason,
    UnresolvedReferenceError,
    rules,
)
from loopwarden import rules as rules_module

OK_RULE = rules.pattern("says-ok", r"\bOK\b")
DONE = "OK <promise>COMPLETE</promise> all done"


def config(**changes: object) -> LoopConfig:
    """A loop that needs the word OK in the output; everything else at its default."""
    changes.setdefault("rules", [OK_RULE])
    return LoopConfig(**changes)  # type: ignore[arg-type]


class TestStart:
    """Starting a loop."""

    def test_start_enters_executing_iteration_one(self, engine: LoopEngine) -> None:
        """start() returns the loop executing iteration 1 with the original prompt."""
        loop = engine.start("TASK-1", config(), prompt="Fix the parser", context={"b": "main"})
        assert loop.state is State.EXECUTING
        assert (loop.task_id, loop.iteration, loop.current_prompt) == (
            "TASK-1",
            1,
            "Fix the parser",
        )
        assert loop.context == {"b": "main"}
        assert engine.get(loop.id).state is State.EXECUTING

    def test_create_leaves_it_initialized_and_resume_starts_it(self, engine: LoopEngine) -> None:
        """create() stores the loop without starting it; resume() starts it."""
        loop = engine.create("TASK-1", config(), prompt="p")
        assert (loop.state, loop.iteration) == (State.INITIALIZED, 0)
        resumed = engine.resume(loop.id)
        assert (resumed.state, resumed.iteration, resumed.current_prompt) == (
            State.EXECUTING,
            1,
            "p",
        )


class TestSubmit:
    """Submitting an iteration's output returns the decision."""

    def test_returns_a_decision_with_every_field(self, engine: LoopEngine) -> None:
        """A failed validation continues: signal, state, iteration, score, reason, feedback."""
        loop = engine.start("T", config())
        d = engine.submit(loop.id, "not yet")
        assert isinstance(d, Decision)
        assert (d.signal, d.state, d.iteration, d.score) == (
            Signal.CONTINUE,
            State.EXECUTING,
            1,
            0.0,
        )
        assert "validation failed" in d.reason
        assert len(d.feedback) == 1
        assert "says-ok" in d.feedback[0]
        assert d.terminal_reason is None

    def test_continue_carries_the_feedback_into_the_next_prompt(self, engine: LoopEngine) -> None:
        """The next iteration's prompt is the original prompt plus the decision's feedback."""
        loop = engine.start("T", config(), prompt="Fix the parser")
        d = engine.submit(loop.id, "not yet")
        snap = engine.get(loop.id)
        assert snap.iteration == 2
        assert snap.current_prompt.startswith("Fix the parser")
        assert d.feedback[0] in snap.current_prompt
        assert snap.last_decision == d

    def test_a_passing_iteration_without_a_claim_keeps_the_prompt(self, engine: LoopEngine) -> None:
        """No feedback, no change to the prompt: the loop just goes on."""
        loop = engine.start("T", config(), prompt="Fix the parser")
        d = engine.submit(loop.id, "OK so far")
        assert (d.signal, d.score, d.feedback) == (Signal.CONTINUE, 100.0, ())
        assert engine.get(loop.id).current_prompt == "Fix the parser"

    def test_submit_outside_executing_is_refused(self, engine: LoopEngine) -> None:
        """A terminal loop accepts no submit and nothing is written."""
        loop = engine.start("T", config())
        engine.submit(loop.id, DONE)
        before = engine.checkpoints(loop.id)
        with pytest.raises(InvalidTransitionError, match="completed"):
            engine.submit(loop.id, DONE)
        assert engine.checkpoints(loop.id) == before


class TestCompletion:
    """A completion claim ends the loop only when the policy accepts it."""

    def test_promise_with_passing_rules_completes(self, engine: LoopEngine) -> None:
        """COMPLETE promise + every rule passing → completed, terminal reason completed."""
        loop = engine.start("T", config())
        d = engine.submit(loop.id, DONE)
        assert (d.signal, d.state, d.terminal_reason) == (
            Signal.COMPLETE,
            State.COMPLETED,
            TerminalReason.COMPLETED,
        )
        snap = engine.get(loop.id)
        assert (snap.state, snap.terminal_reason) == (State.COMPLETED, TerminalReason.COMPLETED)
        assert snap.reason == d.reason

    def test_a_rejected_claim_continues_with_the_rejection_as_feedback(
        self, engine: LoopEngine
    ) -> None:
        """A promise while a rule fails is not completion; the agent is told why."""
        loop = engine.start("T", config())
        d = engine.submit(loop.id, "<promise>COMPLETE</promise>")
        assert d.signal is Signal.CONTINUE
        assert "not accepted" in d.feedback[0]
        assert "not accepted" in engine.get(loop.id).current_prompt

    def test_success_on_the_last_allowed_iteration_completes(self, engine: LoopEngine) -> None:
        """Completion outranks the iteration limit."""
        loop = engine.start("T", config(max_iterations=2))
        engine.submit(loop.id, "no")
        d = engine.submit(loop.id, DONE)
        assert (d.iteration, d.terminal_reason) == (2, TerminalReason.COMPLETED)

    @pytest.mark.parametrize("sep", ["\n", " "], ids=["two-lines", "one-line"])
    def test_a_blocked_promise_outranks_a_completion_claim(
        self, engine: LoopEngine, sep: str
    ) -> None:
        """BLOCKED anywhere in the output wins over COMPLETE, even on the same line."""
        loop = engine.start("T", config())
        d = engine.submit(loop.id, f"OK <promise>COMPLETE</promise>{sep}<promise>BLOCKED</promise>")
        assert (d.signal, d.terminal_reason) == (Signal.BLOCKED, TerminalReason.BLOCKED_BY_AGENT)

    def test_rules_policy_completes_without_a_promise(self, engine: LoopEngine) -> None:
        """completion='rules' completes as soon as every rule passes."""
        loop = engine.start("T", config(completion="rules"))
        assert engine.submit(loop.id, "OK").signal is Signal.COMPLETE


class TestGuards:
    """Safety guards stop a loop that is not getting anywhere."""

    def test_max_iterations_escalates_at_the_limit(self, engine: LoopEngine) -> None:
        """The last allowed iteration without completion escalates with max_iterations."""
        loop = engine.start("T", config(max_iterations=3))
        signals = [engine.submit(loop.id, "OK").signal for _ in range(3)]
        assert signals == [Signal.CONTINUE, Signal.CONTINUE, Signal.ESCALATE]
        snap = engine.get(loop.id)
        assert (snap.state, snap.terminal_reason, snap.iteration) == (
            State.ESCALATED,
            TerminalReason.MAX_ITERATIONS,
            3,
        )
        assert len(engine.history(loop.id)) == 3

    def test_circuit_breaker_trips_at_the_threshold(self, engine: LoopEngine) -> None:
        """threshold consecutive failed validations → escalated, circuit_breaker."""
        loop = engine.start("T", config(circuit_breaker_threshold=2))
        assert engine.submit(loop.id, "no").signal is Signal.CONTINUE
        d = engine.submit(loop.id, "no")
        assert (d.signal, d.state, d.terminal_reason) == (
            Signal.ESCALATE,
            State.ESCALATED,
            TerminalReason.CIRCUIT_BREAKER,
        )

    def test_a_passing_iteration_resets_the_breaker(self, engine: LoopEngine) -> None:
        """fail, pass, fail never trips a threshold of 2."""
        loop = engine.start("T", config(circuit_breaker_threshold=2))
        signals = [engine.submit(loop.id, out).signal for out in ("no", "OK", "no")]
        assert signals == [Signal.CONTINUE] * 3
        assert engine.get(loop.id).consecutive_failures == 1

    def test_a_regression_window_above_fifty_is_honoured(self, engine: LoopEngine) -> None:
        """55 strictly falling scores trip a regression window of 55."""
        n = 60
        checks = [rules.pattern(f"r{k}", f"m{k};") for k in range(n)]
        cfg = LoopConfig(
            max_iterations=100,
            circuit_breaker_threshold=100,
            regression_window=55,
            regression_min_drop=10,
            rules=checks,
        )
        loop = engine.start("T", cfg)
        d = None
        for i in range(1, n):
            d = engine.submit(loop.id, "".join(f"m{k};" for k in range(n - i + 1)))
            if d.terminal:
                break
        assert d is not None
        assert (d.iteration, d.terminal_reason) == (55, TerminalReason.REGRESSION)


class TestContext:
    """The agent context is carried across iterations and merged on submit."""

    def test_context_is_merged_and_persisted(self, engine: LoopEngine, db_url: str) -> None:
        """Each submit's context updates the stored one; a new engine sees the result."""
        seen: list[dict[str, object]] = []

        def record(submission: rules.Submission) -> bool:
            seen.append(dict(submission.context))
            return True

        cfg = LoopConfig(rules=[rules.predicate("engine-context-seen", record)])
        loop = engine.start("T", cfg, context={"branch": "main", "k": 0})
        engine.submit(loop.id, "one", context={"k": 1, "extra": [1, 2]})
        engine.submit(loop.id, "two", context={"k": 2})
        engine.submit(loop.id, "three")
        assert seen == [
            {"branch": "main", "k": 1, "extra": [1, 2]},
            {"branch": "main", "k": 2, "extra": [1, 2]},
            {"branch": "main", "k": 2, "extra": [1, 2]},
        ]
        with LoopEngine(db_url) as other:
            assert other.get(loop.id).context == {"branch": "main", "k": 2, "extra": [1, 2]}


class TestHistory:
    """history() records every decided iteration."""

    def test_records_output_report_score_signal_reason_and_times(self, engine: LoopEngine) -> None:
        """One record per decided iteration, in order, with what went in and what came out."""
        before = time.time()
        loop = engine.start("T", config(), prompt="p")
        engine.submit(loop.id, "no", files_modified=["a.py"], draft="d1")
        engine.submit(loop.id, DONE)
        first, second = engine.history(loop.id)
        assert (first.iteration, first.output, first.files_modified, first.draft) == (
            1,
            "no",
            ("a.py",),
            "d1",
        )
        assert first.prompt == "p"
        assert second.prompt == engine.checkpoints(loop.id)[4].data["prompt"]
        assert (first.signal, first.score, first.report.passed) == (Signal.CONTINUE, 0.0, False)
        assert [r.name for r in first.report.results] == ["says-ok"]
        assert (second.signal, second.score, second.decision.terminal_reason) == (
            Signal.COMPLETE,
            100.0,
            TerminalReason.COMPLETED,
        )
        assert [p.kind for p in second.promises] == [Signal.COMPLETE]
        assert "validation failed" in first.reason
        for r in (first, second):
            assert before <= r.started_at <= r.submitted_at <= r.decided_at <= time.time()
        assert first.decided_at <= second.started_at


class TestCheckpoints:
    """checkpoints(): one immutable record per state entered."""

    def test_one_checkpoint_per_state_entry_in_machine_order(self, engine: LoopEngine) -> None:
        """seq is contiguous from 1; states and triggers follow the machine."""
        loop = engine.start("T", config())
        engine.submit(loop.id, "no")
        engine.submit(loop.id, DONE)
        cps = engine.checkpoints(loop.id)
        assert [c.seq for c in cps] == list(range(1, len(cps) + 1))
        assert [(c.state.value, c.trigger, c.iteration) for c in cps] == [
            ("initialized", "create", 0),
            ("executing", "start", 1),
            ("validating", "submit", 1),
            ("deciding", "evaluate", 1),
            ("executing", "decide", 2),
            ("validating", "submit", 2),
            ("deciding", "evaluate", 2),
            ("completed", "decide", 2),
        ]
        assert engine.get(loop.id).seq == len(cps)
        assert {c.schema_version for c in cps} == {cps[0].schema_version}
        assert all(a.created_at <= b.created_at for a, b in itertools.pairwise(cps))

    @staticmethod
    def _sizes(engine: LoopEngine, loop_id: str, iteration: int) -> dict[str, int]:
        """The size of each kind of checkpoint for one iteration, every number counted as 0."""
        out = {}
        for c in engine.checkpoints(loop_id):
            decided = c.data.get("decision", {}).get("iteration")
            if (c.iteration == iteration and c.trigger != "decide") or decided == iteration:
                out[c.trigger] = len(re.sub(r"-?\d+(\.\d+)?", "0", json.dumps(c.data)))
        return out

    def _long_loop(self, engine: LoopEngine, iterations: int) -> str:
        cfg = config(max_iterations=iterations + 5, regression_window=2)
        loop = engine.start("T", cfg, prompt="p", context={"branch": "main"})
        for i in range(1, iterations + 1):
            engine.submit(loop.id, f"OK step {i}", context={"step": i})
        return loop.id

    def test_checkpoint_size_is_bounded(self, engine: LoopEngine) -> None:
        """Checkpoints at iteration 200 are no larger than at iteration 100."""
        loop_id = self._long_loop(engine, 200)
        assert self._sizes(engine, loop_id, 200) == self._sizes(engine, loop_id, 100)

    def test_checkpoint_size_does_not_grow_with_iterations(self, engine: LoopEngine) -> None:
        """Each kind of checkpoint at iteration 200 is no larger than at iteration 2."""
        loop_id = self._long_loop(engine, 200)
        early, late = self._sizes(engine, loop_id, 2), self._sizes(engine, loop_id, 200)
        assert set(early) == set(late) == {"submit", "evaluate", "decide"}
        assert all(late[k] <= early[k] for k in early), (early, late)


def _stuck_in(engine: LoopEngine, db_url: str, state: str) -> str:
    """A loop left in ``state`` (as a crash would leave it)."""
    if state == "initialized":
        return engine.create("T", config()).id
    loop = engine.start("T", config())
    if state in ("validating", "deciding"):
        leave_in(db_url, loop.id, state)
    assert engine.get(loop.id).state == state
    return loop.id


class TestBlock:
    """block(): a human stops a live loop."""

    @pytest.mark.parametrize("state", ["initialized", "executing", "validating", "deciding"])
    def test_blocks_from_any_live_state(self, engine: LoopEngine, db_url: str, state: str) -> None:
        """Any non-terminal state → blocked, blocked_by_user, with the reason given."""
        loop_id = _stuck_in(engine, db_url, state)
        snap = engine.block(loop_id, "needs a design review")
        assert (snap.state, snap.terminal_reason, snap.reason) == (
            State.BLOCKED,
            TerminalReason.BLOCKED_BY_USER,
            "needs a design review",
        )
        last = engine.checkpoints(loop_id)[-1]
        assert (last.state, last.trigger) == (State.BLOCKED, "block")
        with pytest.raises(InvalidTransitionError):
            engine.submit(loop_id, DONE)

    @pytest.mark.parametrize("state", ["completed", "blocked", "escalated"])
    def test_a_terminal_loop_cannot_be_blocked(self, engine: LoopEngine, state: str) -> None:
        """Terminal states absorb: block is refused and nothing is written."""
        loop = engine.start("T", config(max_iterations=1))
        output = {
            "completed": DONE,
            "blocked": "<promise>BLOCKED</promise>",
            "escalated": "no",
        }[state]
        engine.submit(loop.id, output)
        assert engine.get(loop.id).state == state
        before = engine.checkpoints(loop.id)
        with pytest.raises(InvalidTransitionError):
            engine.block(loop.id, "again")
        assert engine.checkpoints(loop.id) == before


class TestReopen:
    """reopen(): back to executing, optionally with more iterations and a note."""

    def test_reopen_with_extra_iterations_and_a_note(self, engine: LoopEngine) -> None:
        """An escalated loop gets more iterations; the note is the next prompt's feedback."""
        loop = engine.start("T", config(max_iterations=2), prompt="Fix it")
        engine.submit(loop.id, "no")
        engine.submit(loop.id, "no")
        assert engine.get(loop.id).terminal_reason is TerminalReason.MAX_ITERATIONS
        snap = engine.reopen(loop.id, extra_iterations=3, note="try the other parser")
        assert (snap.state, snap.iteration, snap.max_iterations) == (State.EXECUTING, 3, 5)
        assert snap.terminal_reason is None
        assert snap.current_prompt.startswith("Fix it")
        assert "try the other parser" in snap.current_prompt
        d = engine.submit(loop.id, DONE)
        assert (d.iteration, d.terminal_reason) == (3, TerminalReason.COMPLETED)
        assert [r.iteration for r in engine.history(loop.id)] == [1, 2, 3]

    def test_reopen_is_refused_when_no_iterations_are_left(self, engine: LoopEngine) -> None:
        """At the limit, reopen without extra iterations says to add some; nothing is written."""
        loop = engine.start("T", config(max_iterations=1))
        engine.submit(loop.id, "no")
        before = engine.checkpoints(loop.id)
        with pytest.raises(InvalidTransitionError, match="extra_iterations"):
            engine.reopen(loop.id)
        assert engine.checkpoints(loop.id) == before
        assert engine.get(loop.id).state is State.ESCALATED

    def test_a_blocked_loop_with_iterations_left_reopens_where_it_stopped(
        self, engine: LoopEngine
    ) -> None:
        """Blocked mid-iteration, it reopens at that same (undecided) iteration."""
        loop = engine.start("T", config())
        engine.submit(loop.id, "no")
        engine.block(loop.id, "wait")
        snap = engine.reopen(loop.id, note="go on")
        assert (snap.state, snap.iteration) == (State.EXECUTING, 2)

    def test_reopen_resets_the_breaker(self, engine: LoopEngine) -> None:
        """A human has looked at the loop: the breaker counts afresh."""
        loop = engine.start("T", config(circuit_breaker_threshold=2))
        engine.submit(loop.id, "no")
        engine.submit(loop.id, "no")
        engine.reopen(loop.id)
        assert engine.submit(loop.id, "no").signal is Signal.CONTINUE

    @pytest.mark.parametrize("extra", [-1, 1.5, "2", True])
    def test_extra_iterations_must_be_a_whole_number(
        self, engine: LoopEngine, extra: object
    ) -> None:
        """A bad extra_iterations is a ConfigError naming it."""
        loop = engine.start("T", config(max_iterations=1))
        engine.submit(loop.id, "no")
        with pytest.raises(ConfigError) as info:
            engine.reopen(loop.id, extra_iterations=extra)  # type: ignore[arg-type]
        assert info.value.field == "extra_iterations"

    @pytest.mark.parametrize("output", [DONE, None])
    def test_reopen_is_refused_for_completed_and_live_loops(
        self, engine: LoopEngine, output: str | None
    ) -> None:
        """Only blocked and escalated loops reopen."""
        loop = engine.start("T", config())
        if output:
            engine.submit(loop.id, output)
        with pytest.raises(InvalidTransitionError):
            engine.reopen(loop.id, extra_iterations=2)


class TestSetMaxIterations:
    """set_max_iterations(): change a live loop's budget."""

    def test_raising_it_lets_the_loop_run_past_the_old_limit(
        self, engine: LoopEngine, db_url: str
    ) -> None:
        """The new limit is stored and used by later decisions."""
        loop = engine.start("T", config(max_iterations=2))
        engine.submit(loop.id, "no")
        assert engine.set_max_iterations(loop.id, 4).max_iterations == 4
        assert engine.submit(loop.id, "no").signal is Signal.CONTINUE
        with LoopEngine(db_url) as other:
            assert other.get(loop.id).max_iterations == 4
            assert other.get(loop.id).config.max_iterations == 4

    def test_lowering_it_to_the_current_iteration_stops_there(self, engine: LoopEngine) -> None:
        """The iteration in progress becomes the last one."""
        loop = engine.start("T", config(max_iterations=10))
        engine.submit(loop.id, "no")
        engine.set_max_iterations(loop.id, 2)
        d = engine.submit(loop.id, "OK")
        assert (d.iteration, d.terminal_reason) == (2, TerminalReason.MAX_ITERATIONS)

    def test_below_the_current_iteration_is_a_config_error(self, engine: LoopEngine) -> None:
        """It cannot go below the iteration in progress; nothing changes."""
        loop = engine.start("T", config(max_iterations=10))
        engine.submit(loop.id, "no")
        with pytest.raises(ConfigError) as info:
            engine.set_max_iterations(loop.id, 1)
        assert info.value.field == "max_iterations"
        assert engine.get(loop.id).max_iterations == 10

    def test_a_terminal_loop_is_refused(self, engine: LoopEngine) -> None:
        """A finished loop's budget changes only through reopen."""
        loop = engine.start("T", config())
        engine.submit(loop.id, DONE)
        with pytest.raises(InvalidTransitionError, match="reopen"):
            engine.set_max_iterations(loop.id, 30)


class TestList:
    """list(): loops by state and task."""

    def test_filters_by_state_and_task(self, engine: LoopEngine) -> None:
        """state= and task_id= filter, alone or together; oldest first."""
        a = engine.start("A", config())
        b = engine.start("B", config())
        c = engine.start("A", config())
        engine.submit(c.id, DONE)
        d = engine.create("B", config())
        assert [s.id for s in engine.list()] == [a.id, b.id, c.id, d.id]
        assert [s.id for s in engine.list(task_id="A")] == [a.id, c.id]
        assert [s.id for s in engine.list(state=State.EXECUTING)] == [a.id, b.id]
        assert [s.id for s in engine.list(state="completed")] == [c.id]
        assert [s.id for s in engine.list(state="initialized", task_id="B")] == [d.id]
        assert engine.list(state="blocked") == []
        assert engine.list(task_id="nope") == []


class TestUnregisteredPredicate:
    """A predicate rule stored by name must be registered again in a new process."""

    @pytest.fixture
    def unregistered(self, engine: LoopEngine, monkeypatch: pytest.MonkeyPatch) -> str:
        """A loop whose predicate rule is no longer in the registry (as in a new process)."""
        cfg = LoopConfig(rules=[rules.predicate("engine-forgotten", lambda s: True)])
        loop = engine.start("T", cfg)
        monkeypatch.delitem(rules_module._PREDICATES, "engine-forgotten")
        return loop.id

    def test_resume_names_the_missing_rule(self, unregistered: str, db_url: str) -> None:
        """resume in a new engine raises UnresolvedReferenceError naming the rule."""
        with (
            LoopEngine(db_url) as other,
            pytest.raises(UnresolvedReferenceError, match="engine-forgotten"),
        ):
            other.resume(unregistered)

    def test_resume_of_pending_validation_names_the_missing_rule(
        self, engine: LoopEngine, db_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A loop left in validating cannot be validated without the rule: a clear error."""
        loop = engine.start("T", LoopConfig(rules=[rules.predicate("engine-later", bool)]))
        leave_in(db_url, loop.id, "validating")
        monkeypatch.delitem(rules_module._PREDICATES, "engine-later")
        with LoopEngine(db_url) as other:
            with pytest.raises(UnresolvedReferenceError, match="engine-later"):
                other.resume(loop.id)
            assert other.get(loop.id).state is State.VALIDATING

    def test_submit_names_the_missing_rule_and_writes_nothing(
        self, unregistered: str, db_url: str
    ) -> None:
        """submit raises UnresolvedReferenceError; the loop is unchanged."""
        with LoopEngine(db_url) as other:
            before = other.checkpoints(unregistered)
            with pytest.raises(UnresolvedReferenceError, match="engine-forgotten"):
                other.submit(unregistered, "OK")
            assert other.checkpoints(unregistered) == before

    def test_registering_it_again_lets_the_loop_go_on(self, unregistered: str, db_url: str) -> None:
        """Once registered again, the loop runs to completion."""
        rules.predicate("engine-forgotten", lambda s: True)
        with LoopEngine(db_url) as other:
            other.resume(unregistered)
            assert other.submit(unregistered, DONE).signal is Signal.COMPLETE
