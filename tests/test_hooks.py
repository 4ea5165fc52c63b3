"""In-process stop hooks and completion validators (issue 3)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwarden import (
    ConfigError,
    LoopConfig,
    LoopEngine,
    Signal,
    State,
    TerminalReason,
    UnresolvedReferenceError,
    rules,
)
from loopwarden.hooks import (
    HookContext,
    HookResult,
    all_of,
    any_of,
    command_succeeds,
    define_hook,
    define_validator,
    stop_hook,
    todos_done,
    validator,
    when,
)
from loopwarden.hooks.stop import _REGISTRY, NO_HOOKS_REASON, evaluate_hooks, resolve_hook
from loopwarden.hooks.validators import ValidatorInput
from loopwarden.model import HookAction, Promise, RuleResult, RuleStatus

REPO = Path(__file__).resolve().parents[1]


def ctx(
    output: str = "",
    *,
    iteration: int = 1,
    results: tuple[RuleResult, ...] = (),
    promises: tuple[Promise, ...] = (),
    files: tuple[str, ...] = (),
) -> HookContext:
    return HookContext(
        task_id="T",
        loop_id="L",
        iteration=iteration,
        phase="validating",
        agent_output=output,
        files_modified=files,
        validation_results=results,
        promises=promises,
    )


def answer(action: str, reason: str = "") -> Any:
    def hook(_: HookContext) -> HookResult:
        return HookResult(HookAction(action), reason or action)

    return hook


def raising(_: HookContext) -> HookResult:
    raise RuntimeError("boom")


PASS = RuleResult("tests", RuleStatus.PASSED, "ok")
FAIL = RuleResult("tests", RuleStatus.FAILED, "2 failed")
COMPLETE = Promise(Signal.COMPLETE, "COMPLETE")
ESCALATE = Promise(Signal.ESCALATE, "ESCALATE", "need a human")
BLOCKED = Promise(Signal.BLOCKED, "BLOCKED")


def run(*hooks: Any, context: HookContext | None = None, enabled: Any = None) -> Any:
    entries = [
        (
            f"h{i}",
            f"h{i}",
            h if hasattr(h, "name") else _wrap(h),
            True if enabled is None else enabled[i],
        )
        for i, h in enumerate(hooks)
    ]
    return evaluate_hooks(entries, context or ctx())


def _wrap(fn: Any) -> Any:
    from loopwarden.hooks.stop import as_hook

    return as_hook(fn)


class TestEvaluationOrder:
    def test_no_hooks_continue(self) -> None:
        """No hooks: continue with reason 'No hooks registered for this task'."""
        ev = run()
        assert ev.action is HookAction.CONTINUE
        assert ev.result.reason == NO_HOOKS_REASON

    def test_first_complete_stops_evaluation(self) -> None:
        """The first complete wins and later hooks are not evaluated."""
        ev = run(answer("continue"), answer("complete", "done"), raising)
        assert ev.action is HookAction.COMPLETE
        assert ev.hook_id == "h1"
        assert len(ev.records) == 2

    def test_first_escalate_stops_evaluation(self) -> None:
        """The first escalate wins."""
        ev = run(answer("escalate", "stop"), answer("complete"))
        assert ev.action is HookAction.ESCALATE
        assert ev.result.reason == "stop"

    def test_all_continue_uses_the_last(self) -> None:
        """When every hook continues, the last one's result is used."""
        ev = run(answer("continue", "first"), answer("continue", "last"))
        assert ev.result.reason == "last"
        assert ev.hook_id == "h1"

    def test_disabled_hooks_are_skipped(self) -> None:
        """A disabled hook is not evaluated."""
        ev = run(answer("complete"), answer("continue", "only"), enabled=[False, True])
        assert ev.result.reason == "only"
        assert [r.hook_id for r in ev.records] == ["h1"]

    def test_raising_hook_escalates_with_error(self) -> None:
        """A hook that raises escalates with 'Hook evaluation failed: <message>'."""
        ev = run(raising)
        assert ev.action is HookAction.ESCALATE
        assert ev.result.reason == "Hook evaluation failed: boom"
        assert "RuntimeError" in ev.result.metadata["error"]

    def test_async_hooks(self) -> None:
        """An async hook is awaited."""

        async def slow(c: HookContext) -> dict[str, str]:
            await asyncio.sleep(0)
            return {"action": "complete", "reason": f"async {c.iteration}"}

        assert run(slow).result.reason == "async 1"

    def test_async_hook_inside_a_running_loop(self) -> None:
        """An async hook evaluated from code already inside an event loop still runs."""

        async def inner(_: HookContext) -> dict[str, str]:
            return {"action": "continue", "reason": "inner"}

        async def main() -> str:
            return str(run(inner).result.reason)

        assert asyncio.run(main()) == "inner"

    def test_dict_answers_are_accepted(self) -> None:
        """A dict with action/reason/next_prompt/metadata is a valid answer."""
        ev = run(lambda c: {"action": "continue", "reason": "r", "next_prompt": "np"})
        assert ev.result.next_prompt == "np"

    def test_bad_action_is_an_escalation_naming_it(self) -> None:
        """An unknown action in a hook's answer escalates with a message naming the field."""
        ev = run(lambda c: {"action": "maybe"})
        assert ev.action is HookAction.ESCALATE
        assert "action" in ev.result.reason

    @given(st.lists(st.sampled_from(["complete", "continue", "escalate", "raise", "none"])))
    def test_order_rules_hold_for_any_results(self, actions: list[str]) -> None:
        """For any list of hook answers, evaluation obeys the order rules."""
        hooks = []
        for a in actions:
            if a == "raise":
                hooks.append(raising)
            elif a == "none":
                hooks.append(lambda c: None)
            else:
                hooks.append(answer(a, a))
        ev = run(*hooks)
        effective = ["escalate" if a == "raise" else a for a in actions]
        decisive = next((a for a in effective if a in ("complete", "escalate")), None)
        answered = [a for a in effective if a != "none"]
        if decisive:
            assert ev.action.value == decisive
            assert len(ev.records) == effective.index(decisive) + 1
        elif answered:
            assert ev.action is HookAction.CONTINUE
            assert len(ev.records) == len(actions)
        else:
            assert ev.action is HookAction.CONTINUE


class TestPresets:
    def test_default_promise_complete(self) -> None:
        """default: a COMPLETE promise completes."""
        assert resolve_hook("default")(ctx(promises=(COMPLETE,))).action is HookAction.COMPLETE

    def test_default_escalate_and_blocked_escalate(self) -> None:
        """default: ESCALATE or BLOCKED escalates."""
        for p in (ESCALATE, BLOCKED):
            result = resolve_hook("default")(ctx(promises=(p,)))
            assert result is not None
            assert result.action is HookAction.ESCALATE

    def test_default_then_validation(self) -> None:
        """default without promises: all pass completes, failures continue naming them."""
        assert resolve_hook("default")(ctx(results=(PASS,))).action is HookAction.COMPLETE
        result = resolve_hook("default")(ctx(results=(PASS, FAIL)))
        assert result is not None
        assert result.action is HookAction.CONTINUE
        assert result.reason == "1 of 2 validation rules failing: tests"

    def test_default_without_rules_or_promises_continues(self) -> None:
        """default with nothing to judge continues."""
        assert resolve_hook("default")(ctx()).action is HookAction.CONTINUE

    def test_validation_preset_ignores_promises(self) -> None:
        """validation: no rules → continue even with a COMPLETE promise."""
        result = resolve_hook("validation")(ctx(promises=(COMPLETE,)))
        assert result is not None
        assert result.action is HookAction.CONTINUE

    def test_promise_preset_ignores_rules(self) -> None:
        """promise: passing rules alone do not complete."""
        result = resolve_hook("promise")(ctx(results=(PASS,)))
        assert result is not None
        assert result.action is HookAction.CONTINUE
        assert resolve_hook("promise")(ctx(promises=(COMPLETE,))).action is HookAction.COMPLETE


class TestComposition:
    def test_all_of_needs_every_member(self) -> None:
        """all_of completes only when every member completes."""
        assert all_of(answer("complete"), answer("complete"))(ctx()).action is HookAction.COMPLETE
        assert all_of(answer("complete"), answer("continue"))(ctx()).action is HookAction.CONTINUE

    def test_any_of_needs_one(self) -> None:
        """any_of completes when one member completes."""
        assert any_of(answer("continue"), answer("complete"))(ctx()).action is HookAction.COMPLETE

    def test_escalation_wins_in_both(self) -> None:
        """A member escalating escalates all_of and any_of alike."""
        for combo in (all_of, any_of):
            assert (
                combo(answer("complete"), answer("escalate"))(ctx()).action is HookAction.ESCALATE
            )

    def test_operators(self) -> None:
        """& and | build all_of and any_of."""
        a, b = resolve_hook("promise"), resolve_hook("validation")
        both = (a & b)(ctx(results=(PASS,), promises=(COMPLETE,)))
        assert both is not None
        assert both.action is HookAction.COMPLETE
        either = (a | b)(ctx(results=(PASS,)))
        assert either is not None
        assert either.action is HookAction.COMPLETE

    def test_conditional_hook(self) -> None:
        """when() is active only while its predicate holds (abstains otherwise)."""
        late = when(lambda c: c.iteration >= 5, answer("escalate", "too long"))
        assert late(ctx(iteration=4)) is None
        result = late(ctx(iteration=5))
        assert result is not None
        assert result.action is HookAction.ESCALATE


class TestRegistry:
    def test_register_list_disable_clear(self, engine: LoopEngine) -> None:
        """register returns ids; list shows order/type; disable/enable flip; clear counts."""
        a = engine.hooks.register("T", "default", metadata={"why": "x"})
        b = engine.hooks.register("T", answer("continue"), name="cont")
        infos = engine.hooks.list("T")
        assert [i.id for i in infos] == [a, b]
        assert [i.type for i in infos] == ["preset", "named"]
        assert infos[0].metadata == {"why": "x"}
        assert engine.hooks.disable(a).enabled is False
        assert engine.hooks.enable(a).enabled is True
        assert engine.hooks.clear("T") == 2
        assert engine.hooks.list("T") == []

    def test_unknown_preset_is_an_error(self, engine: LoopEngine) -> None:
        """Registering an unknown name fails at once, naming it."""
        with pytest.raises(UnresolvedReferenceError, match="nope"):
            engine.hooks.register("T", "nope")

    def test_lambda_needs_a_name(self, engine: LoopEngine) -> None:
        """A lambda cannot be found again on resume without a name."""
        with pytest.raises(ConfigError, match="name"):
            engine.hooks.register("T", lambda c: None)

    def test_registrations_survive_a_new_engine(self, db_url: str) -> None:
        """Registrations are stored with the task, not in the engine."""
        with LoopEngine(db_url) as first:
            first.hooks.register("T", "promise")
        with LoopEngine(db_url) as second:
            assert [i.name for i in second.hooks.list("T")] == ["promise"]


class TestHooksInTheLoop:
    def test_escalate_escalates_the_loop(self, engine: LoopEngine) -> None:
        """A hook answering escalate escalates the loop (escalated_by_hook)."""
        engine.hooks.register("T", answer("escalate", "nope"), name="esc")
        loop = engine.start("T", LoopConfig())
        d = engine.submit(loop.id, "out")
        assert d.state is State.ESCALATED
        assert d.terminal_reason is TerminalReason.ESCALATED_BY_HOOK

    def test_complete_is_subject_to_the_policy(self, engine: LoopEngine) -> None:
        """A hook's complete is a claim: rejected while rules fail under promise_and_rules."""
        engine.hooks.register("T", answer("complete"), name="yes")
        config = LoopConfig(rules=[rules.pattern("ok", "OK")])
        loop = engine.start("T", config)
        assert engine.submit(loop.id, "nope").signal is Signal.CONTINUE
        assert engine.submit(loop.id, "OK").signal is Signal.COMPLETE

    def test_continue_reason_and_next_prompt_reach_the_next_iteration(
        self, engine: LoopEngine
    ) -> None:
        """A continue's reason becomes feedback and its next_prompt the next prompt's base."""
        engine.hooks.register(
            "T",
            lambda c: {"action": "continue", "reason": "add tests", "next_prompt": "Write tests"},
            name="np",
        )
        loop = engine.start("T", LoopConfig(), prompt="Fix it")
        d = engine.submit(loop.id, "out")
        assert any("add tests" in f for f in d.feedback)
        prompt = engine.get(loop.id).current_prompt
        assert prompt.startswith("Write tests")
        assert "add tests" in prompt

    def test_hook_cannot_outlive_max_iterations(self, engine: LoopEngine) -> None:
        """Safety guards win: a hook that always continues still stops at max_iterations."""
        engine.hooks.register("T", answer("continue"), name="forever")
        loop = engine.start("T", LoopConfig(max_iterations=2))
        engine.submit(loop.id, "a")
        d = engine.submit(loop.id, "b")
        assert d.terminal_reason is TerminalReason.MAX_ITERATIONS

    def test_checkpoint_data_joins_the_agent_context(self, engine: LoopEngine) -> None:
        """checkpoint_data from a hook is merged into the agent context."""
        engine.hooks.register(
            "T",
            lambda c: {"action": "continue", "checkpoint_data": {"seen": c.iteration}},
            name="cd",
        )
        loop = engine.start("T", LoopConfig(), context={"a": 1})
        engine.submit(loop.id, "x")
        assert engine.get(loop.id).context == {"a": 1, "seen": 1}

    def test_history_records_each_evaluation(self, engine: LoopEngine) -> None:
        """history shows each hook's id, action, reason and duration."""
        hook_id = engine.hooks.register("T", "promise")
        loop = engine.start("T", LoopConfig())
        engine.submit(loop.id, "<promise>COMPLETE</promise>")
        [record] = engine.history(loop.id)
        [h] = record.hooks
        assert h["hook_id"] == hook_id
        assert h["action"] == "complete"
        assert h["duration"] >= 0

    def test_evaluate_is_a_dry_run(self, engine: LoopEngine) -> None:
        """engine.evaluate_hooks answers for given output without moving the loop."""
        engine.hooks.register("T", "promise")
        loop = engine.start("T", LoopConfig())
        ev = engine.evaluate_hooks(loop.id, "<promise>COMPLETE</promise>")
        assert ev.action is HookAction.COMPLETE
        assert engine.get(loop.id).seq == loop.seq

    def test_missing_hook_is_an_error_at_resume(self, engine: LoopEngine) -> None:
        """A registration whose callable is unknown here fails resume, naming the hook."""
        engine.hooks.register("T", answer("continue"), name="ephemeral-hook")
        loop = engine.start("T", LoopConfig())
        del _REGISTRY["ephemeral-hook"]
        with pytest.raises(UnresolvedReferenceError, match="ephemeral-hook"):
            engine.submit(loop.id, "x")
        with pytest.raises(UnresolvedReferenceError, match="ephemeral-hook"):
            engine.resume(loop.id)


class TestCompletionValidators:
    def test_rendering(self) -> None:
        """Outcomes render as [complete] reason / [incomplete] reason."""
        v = validator(lambda reason, tools, retries: (tools > 0, f"{tools} tools"))
        assert str(v.validate_completion("done", 0, 0)) == "[incomplete] 0 tools"
        assert str(v.validate_completion("done", 3, 0)) == "[complete] 3 tools"

    def test_and_returns_the_first_failure(self) -> None:
        """Validators combine with AND; the first failing one answers."""
        ok = validator(lambda *a: (True, "fine"))
        no1 = validator(lambda *a: (False, "first"))
        no2 = validator(lambda *a: (False, "second"))
        assert (ok & no1 & no2).validate_completion("r", 0, 0).reason == "first"
        assert (ok & ok).validate_completion("r", 0, 0).complete

    def test_todos_done(self) -> None:
        """todos_done: every todo in the agent context must be done."""
        v = todos_done()
        pending = ValidatorInput(
            "r",
            0,
            0,
            {"todos": [{"content": "a", "status": "done"}, {"content": "b", "status": "pending"}]},
            None,
        )
        assert not v.check(pending).complete
        assert "b" in v.check(pending).reason
        done = ValidatorInput("r", 0, 0, {"todos": [{"content": "a", "status": "completed"}]}, None)
        assert v.check(done).complete

    def test_command_succeeds(self, tmp_path: Path) -> None:
        """command_succeeds: exit 0 completes; anything else vetoes with the output."""
        ok = command_succeeds([sys.executable, "-c", "pass"])
        bad = command_succeeds([sys.executable, "-c", "print('red'); raise SystemExit(3)"])
        given_ = ValidatorInput("r", 0, 0, {}, str(tmp_path))
        assert ok.check(given_).complete
        outcome = bad.check(given_)
        assert not outcome.complete
        assert "3" in outcome.reason
        assert "red" in outcome.reason

    def test_veto_continues_with_feedback_and_counts_retries(self, engine: LoopEngine) -> None:
        """A veto continues the loop with the reason as feedback."""
        engine.hooks.register_validator("T", todos_done())
        loop = engine.start("T", LoopConfig(), context={"todos": [{"content": "a"}]})
        d = engine.submit(loop.id, "<promise>COMPLETE</promise>")
        assert d.signal is Signal.CONTINUE
        assert any("[incomplete]" in f for f in d.feedback)
        d = engine.submit(
            loop.id,
            "<promise>COMPLETE</promise>",
            context={"todos": [{"content": "a", "done": True}]},
        )
        assert d.signal is Signal.COMPLETE
        assert not d.forced

    def test_stop_forced_after_max_stop_retries(self, engine: LoopEngine) -> None:
        """After max_stop_retries vetoes in a row the stop is allowed and recorded as forced."""
        define_validator("never", lambda *a: (False, "never happy"))
        from loopwarden.hooks.validators import resolve_validator

        engine.hooks.register_validator("T", resolve_validator({"name": "never"}))
        loop = engine.start("T", LoopConfig(max_stop_retries=2, max_iterations=10))
        signals = [engine.submit(loop.id, "<promise>COMPLETE</promise>") for _ in range(3)]
        assert [d.signal for d in signals] == [Signal.CONTINUE, Signal.CONTINUE, Signal.COMPLETE]
        assert signals[-1].forced
        assert "forced" in signals[-1].reason

    def test_raising_validator_allows_the_stop_and_says_so(self, engine: LoopEngine) -> None:
        """A validator that raises is logged; the stop is allowed and the record says so."""

        def broken(*_: Any) -> tuple[bool, str]:
            raise ValueError("cannot tell")

        engine.hooks.register_validator("T", define_validator("broken", broken))
        loop = engine.start("T", LoopConfig())
        d = engine.submit(loop.id, "<promise>COMPLETE</promise>")
        assert d.signal is Signal.COMPLETE
        assert "cannot tell" in d.reason

    def test_no_validator_allows_the_stop(self, engine: LoopEngine) -> None:
        """Without validators the stop is allowed."""
        loop = engine.start("T", LoopConfig())
        assert engine.submit(loop.id, "<promise>COMPLETE</promise>").signal is Signal.COMPLETE


HOOK_MODULE = textwrap.dedent(
    """
    import os, signal, sys
    from loopwarden import LoopConfig, LoopEngine
    from loopwarden.hooks import stop_hook

    @stop_hook("same-output-twice")
    def same_output_twice(ctx):
        seen = ctx.context.get("outputs", [])
        if ctx.agent_output in seen:
            return {"action": "escalate", "reason": "the agent repeats itself"}
        return {"action": "continue", "reason": "new output",
                "checkpoint_data": {"outputs": [*seen, ctx.agent_output]}}

    def main():
        mode, url = sys.argv[1], sys.argv[2]
        engine = LoopEngine(url)
        if mode == "start":
            engine.hooks.register("T", "same-output-twice")
            loop = engine.start("T", LoopConfig(max_iterations=10))
            engine.submit(loop.id, "attempt")
            print(loop.id, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        else:
            loop_id = sys.argv[3]
            engine.resume(loop_id)
            d = engine.submit(loop_id, "attempt")
            print(d.terminal_reason.value if d.terminal_reason else d.signal.value)

    main()
    """
)


class TestHooksAcrossProcesses:
    def test_hooks_in_force_after_kill_and_resume(self, tmp_path: Path, db_url: str) -> None:
        """Hooks registered before a SIGKILL are evaluated by the resuming process."""
        script = tmp_path / "agent_hooks.py"
        script.write_text(HOOK_MODULE)
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        first = subprocess.run(
            [sys.executable, str(script), "start", db_url],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert first.returncode == -signal.SIGKILL
        loop_id = first.stdout.strip()
        second = subprocess.run(
            [sys.executable, str(script), "resume", db_url, loop_id],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert second.returncode == 0, second.stderr
        assert second.stdout.strip() == "escalated_by_hook"

    def test_missing_hook_in_new_process_names_it(self, tmp_path: Path, db_url: str) -> None:
        """A new process that never defined the hook gets an error naming it at resume."""
        with LoopEngine(db_url) as engine:
            define_hook("only-in-this-process", answer("continue"))
            engine.hooks.register("T", "only-in-this-process")
            loop = engine.start("T", LoopConfig())
        code = (
            "import sys\nfrom loopwarden import LoopEngine, UnresolvedReferenceError\n"
            "e = LoopEngine(sys.argv[1])\n"
            "try:\n    e.resume(sys.argv[2])\nexcept UnresolvedReferenceError as exc:\n"
            "    print(exc)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, db_url, loop.id],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert "only-in-this-process" in out.stdout


@stop_hook("example-decorated")
def _decorated(_: HookContext) -> HookResult:
    return HookResult(HookAction.CONTINUE, "decorated")


class TestDecorator:
    def test_stop_hook_registers_by_name(self) -> None:
        """@stop_hook registers the function under its name."""
        result = resolve_hook("example-decorated")(ctx())
        assert result is not None
        assert result.reason == "decorated"


class TestNamesInComposition:
    def test_presets_by_name(self) -> None:
        """all_of / any_of accept preset and registered names."""
        result = all_of("promise", "validation")(ctx(results=(PASS,), promises=(COMPLETE,)))
        assert result is not None
        assert result.action is HookAction.COMPLETE
