"""decide(): the precedence of DESIGN §2 as a pure function of the stored evidence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwarden import (
    CircuitBreaker,
    CompletionPolicy,
    Decision,
    Evidence,
    HookAction,
    HookVerdict,
    LoopConfig,
    MaxIterations,
    Promise,
    Regression,
    RuleResult,
    RuleStatus,
    Signal,
    State,
    StopCheck,
    TerminalReason,
    ValidationReport,
    decide,
    guard,
    rules,
)
from loopwarden.decide import bound_feedback, next_counters, rule_feedback
from loopwarden.testing import configs, configs_and_evidence, promises, validation_reports

COMPLETE = Promise(Signal.COMPLETE, "COMPLETE")
BLOCKED = Promise(Signal.BLOCKED, "BLOCKED", "no credentials")
ESCALATE = Promise(Signal.ESCALATE, "ESCALATE", "out of my depth")

DEFAULT = LoopConfig()
TWO_RULES = (rules.pattern("a", "a"), rules.pattern("b", "b"))


def report(*statuses: str, messages: Sequence[str] = ()) -> ValidationReport:
    """A report with one rule per status, named r0, r1, ..."""
    msgs = list(messages) + [f"message {i}" for i in range(len(messages), len(statuses))]
    return ValidationReport(
        tuple(RuleResult(f"r{i}", RuleStatus(s), msgs[i]) for i, s in enumerate(statuses))
    )


PASS = report("passed", "passed")
FAIL = report("passed", "failed")


def make_evidence(
    iteration: int = 1,
    max_iterations: int = 15,
    *,
    report: ValidationReport = PASS,
    promises: Sequence[Promise] = (),
    failures: int | None = None,
    scores: Sequence[float] | None = None,
    hook: HookVerdict | None = None,
    stop_checks: Sequence[StopCheck] = (),
) -> Evidence:
    """Evidence for one decision; counters default to what this report alone implies."""
    return Evidence(
        iteration=iteration,
        max_iterations=max_iterations,
        report=report,
        promises=tuple(promises),
        consecutive_failures=(0 if report.passed else 1) if failures is None else failures,
        scores=(report.score,) if scores is None else tuple(scores),
        hook=hook,
        stop_checks=tuple(stop_checks),
    )


def hook(action: str, reason: str = "", next_prompt: str | None = None) -> HookVerdict:
    return HookVerdict(HookAction(action), reason, next_prompt, source="my-hook")


class TestPrecedence:
    def test_blocked_promise_wins_over_everything(self) -> None:
        """A BLOCKED promise blocks even with ESCALATE, COMPLETE, a hook and tripped guards."""
        d = decide(
            make_evidence(
                15,
                15,
                report=FAIL,
                promises=[COMPLETE, ESCALATE, BLOCKED],
                failures=9,
                scores=(90, 50, 10),
                hook=hook("escalate"),
            ),
            DEFAULT,
        )
        assert (d.signal, d.state, d.terminal_reason) == (
            Signal.BLOCKED,
            State.BLOCKED,
            TerminalReason.BLOCKED_BY_AGENT,
        )
        assert "no credentials" in d.reason

    def test_escalate_promise_beats_completion_and_guards(self) -> None:
        """An ESCALATE promise escalates by the agent even when completion would be accepted."""
        d = decide(make_evidence(15, 15, promises=[COMPLETE, ESCALATE]), DEFAULT)
        assert (d.signal, d.state, d.terminal_reason) == (
            Signal.ESCALATE,
            State.ESCALATED,
            TerminalReason.ESCALATED_BY_AGENT,
        )
        assert "out of my depth" in d.reason

    def test_escalate_promise_before_escalate_hook(self) -> None:
        """When both the agent and a hook escalate, the agent's promise is the reason."""
        d = decide(make_evidence(promises=[ESCALATE], hook=hook("escalate")), DEFAULT)
        assert d.terminal_reason is TerminalReason.ESCALATED_BY_AGENT

    def test_hook_escalate_beats_completion(self) -> None:
        """A hook answering escalate escalates even with an accepted COMPLETE promise."""
        d = decide(make_evidence(promises=[COMPLETE], hook=hook("escalate", "stuck")), DEFAULT)
        assert (d.signal, d.terminal_reason) == (Signal.ESCALATE, TerminalReason.ESCALATED_BY_HOOK)
        assert "my-hook" in d.reason
        assert "stuck" in d.reason

    def test_completion_beats_the_circuit_breaker(self) -> None:
        """An accepted completion wins even when the breaker would trip."""
        d = decide(make_evidence(promises=[COMPLETE], failures=99), DEFAULT)
        assert d.signal is Signal.COMPLETE

    def test_breaker_beats_regression_and_max_iterations(self) -> None:
        """With every safety guard tripping the circuit breaker is the reason."""
        d = decide(make_evidence(15, 15, report=FAIL, failures=3, scores=(90, 50, 0)), DEFAULT)
        assert d.terminal_reason is TerminalReason.CIRCUIT_BREAKER

    def test_regression_beats_max_iterations(self) -> None:
        """Regression is checked before max iterations."""
        d = decide(make_evidence(15, 15, report=FAIL, failures=1, scores=(90, 50, 0)), DEFAULT)
        assert d.terminal_reason is TerminalReason.REGRESSION

    def test_otherwise_continue(self) -> None:
        """With nothing firing the loop continues to the next iteration."""
        d = decide(make_evidence(3, 15, report=FAIL), DEFAULT)
        assert (d.signal, d.state, d.terminal_reason) == (Signal.CONTINUE, State.EXECUTING, None)
        assert d.iteration == 3
        assert not d.terminal


class TestMaxIterationsEdges:
    def test_success_on_the_last_allowed_iteration_completes(self) -> None:
        """A verified completion on iteration == max completes, it does not escalate."""
        d = decide(make_evidence(5, 5, promises=[COMPLETE]), LoopConfig(max_iterations=5))
        assert (d.signal, d.state, d.terminal_reason) == (
            Signal.COMPLETE,
            State.COMPLETED,
            TerminalReason.COMPLETED,
        )

    def test_last_iteration_without_completion_escalates(self) -> None:
        """Reaching max without a verified completion escalates with max_iterations."""
        d = decide(make_evidence(5, 5), LoopConfig(max_iterations=5))
        assert (d.signal, d.terminal_reason) == (Signal.ESCALATE, TerminalReason.MAX_ITERATIONS)

    def test_one_before_the_last_continues(self) -> None:
        """Iteration max-1 without completion continues."""
        assert decide(make_evidence(4, 5), LoopConfig(max_iterations=5)).signal is Signal.CONTINUE

    def test_rejected_promise_on_the_last_iteration_escalates(self) -> None:
        """A promise rejected by the rules on the last iteration stops at the limit."""
        d = decide(make_evidence(5, 5, report=FAIL, promises=[COMPLETE]), LoopConfig())
        assert d.terminal_reason is TerminalReason.MAX_ITERATIONS

    def test_max_iterations_of_one(self) -> None:
        """With max_iterations=1 the first iteration is the last."""
        d = decide(make_evidence(1, 1), LoopConfig(max_iterations=1))
        assert d.terminal_reason is TerminalReason.MAX_ITERATIONS


class TestCircuitBreakerInDecide:
    def test_trips_exactly_at_the_threshold(self) -> None:
        """Failures counted by next_counters trip the breaker on the threshold-th failure."""
        config = LoopConfig(circuit_breaker_threshold=3)
        failures: int = 0
        scores: tuple[float, ...] = ()
        signals = []
        for i in range(1, 4):
            failures, scores = next_counters(failures, scores, FAIL, keep=10)
            d = decide(make_evidence(i, report=FAIL, failures=failures, scores=[100.0] * i), config)
            signals.append(d.signal)
        assert signals == [Signal.CONTINUE, Signal.CONTINUE, Signal.ESCALATE]
        assert d.terminal_reason is TerminalReason.CIRCUIT_BREAKER

    def test_a_pass_resets_the_count(self) -> None:
        """A passing iteration resets the consecutive-failure count to zero."""
        failures, _ = next_counters(2, (50.0, 50.0), FAIL, keep=10)
        assert failures == 3
        failures, _ = next_counters(failures, (), PASS, keep=10)
        assert failures == 0
        failures, _ = next_counters(failures, (), FAIL, keep=10)
        assert failures == 1

    def test_fail_fail_pass_fail_fail_does_not_trip(self) -> None:
        """Non-consecutive failures never reach a threshold of 3."""
        config = LoopConfig(circuit_breaker_threshold=3)
        failures = 0
        for i, r in enumerate([FAIL, FAIL, PASS, FAIL, FAIL], start=1):
            failures, _ = next_counters(failures, (), r, keep=3)
            d = decide(make_evidence(i, report=r, failures=failures, scores=[]), config)
            assert d.signal is Signal.CONTINUE

    def test_errored_rules_count_as_failures(self) -> None:
        """An iteration with an errored rule did not pass."""
        failures, _ = next_counters(0, (), report("passed", "errored"), keep=3)
        assert failures == 1

    def test_next_counters_keeps_a_bounded_window(self) -> None:
        """Only the last `keep` scores are kept, newest last."""
        _, scores = next_counters(0, (10.0, 20.0, 30.0), FAIL, keep=3)
        assert scores == (20.0, 30.0, 50.0)


class TestRegressionInDecide:
    def test_strictly_falling_with_drop_above_min_escalates(self) -> None:
        """Scores 90 → 70 → 50 over the window escalate with regression."""
        d = decide(make_evidence(4, report=FAIL, scores=(90, 70, 50)), DEFAULT)
        assert d.terminal_reason is TerminalReason.REGRESSION

    def test_drop_equal_to_min_continues(self) -> None:
        """A drop of exactly regression_min_drop continues."""
        d = decide(make_evidence(4, report=FAIL, scores=(60, 55, 50)), DEFAULT)
        assert d.signal is Signal.CONTINUE

    def test_not_strictly_falling_continues(self) -> None:
        """A plateau inside the window continues."""
        d = decide(make_evidence(4, report=FAIL, scores=(90, 90, 50)), DEFAULT)
        assert d.signal is Signal.CONTINUE


class TestPromiseAndRulesPolicy:
    def test_promise_with_all_rules_passing_completes(self) -> None:
        """COMPLETE counts when every rule passes."""
        d = decide(make_evidence(promises=[COMPLETE]), DEFAULT)
        assert (d.signal, d.terminal_reason) == (Signal.COMPLETE, TerminalReason.COMPLETED)
        assert d.passed
        assert d.feedback == ()

    def test_promise_with_a_failing_rule_is_rejected_into_feedback(self) -> None:
        """A promise with failing rules continues; the rejection is the first feedback item."""
        r = report("passed", "failed", messages=["fine", "3 tests failed"])
        d = decide(make_evidence(report=r, promises=[COMPLETE]), DEFAULT)
        assert d.signal is Signal.CONTINUE
        assert "not accepted" in d.feedback[0]
        assert "1 of 2" in d.feedback[0]
        assert any("3 tests failed" in f for f in d.feedback[1:])
        assert "rejected" in d.reason

    def test_errored_rule_also_rejects(self) -> None:
        """An errored rule is not a pass, so it rejects the promise too."""
        d = decide(make_evidence(report=report("errored"), promises=[COMPLETE]), DEFAULT)
        assert d.signal is Signal.CONTINUE
        assert any("could not be evaluated" in f for f in d.feedback)

    def test_no_rules_accepts_the_promise(self) -> None:
        """With no rules every rule vacuously passes."""
        d = decide(make_evidence(report=ValidationReport(), promises=[COMPLETE]), DEFAULT)
        assert d.signal is Signal.COMPLETE

    def test_passing_rules_without_a_claim_continue(self) -> None:
        """Passing rules alone do not complete under promise_and_rules."""
        d = decide(make_evidence(report=PASS), DEFAULT)
        assert d.signal is Signal.CONTINUE
        assert "no completion claim" in d.reason


class TestPromisePolicy:
    config = LoopConfig(completion=CompletionPolicy.PROMISE)

    def test_trusts_the_promise_despite_failing_rules(self) -> None:
        """Under 'promise' a COMPLETE promise completes even with failing rules."""
        d = decide(make_evidence(report=FAIL, promises=[COMPLETE]), self.config)
        assert (d.signal, d.terminal_reason) == (Signal.COMPLETE, TerminalReason.COMPLETED)
        assert not d.passed
        assert "policy: promise" in d.reason

    def test_no_promise_continues(self) -> None:
        """Without a claim the loop continues."""
        assert decide(make_evidence(report=PASS), self.config).signal is Signal.CONTINUE


class TestRulesPolicy:
    config = LoopConfig(completion="rules", rules=TWO_RULES)

    def test_completes_when_all_rules_pass(self) -> None:
        """Under 'rules' every rule passing completes with no claim needed."""
        d = decide(make_evidence(report=PASS), self.config)
        assert (d.signal, d.terminal_reason) == (Signal.COMPLETE, TerminalReason.COMPLETED)
        assert "policy: rules" in d.reason

    def test_failing_rule_continues_even_with_a_promise(self) -> None:
        """A promise does not complete when a rule fails."""
        d = decide(make_evidence(report=FAIL, promises=[COMPLETE]), self.config)
        assert d.signal is Signal.CONTINUE

    def test_needs_at_least_one_rule(self) -> None:
        """The rules policy without rules is a ConfigError on completion."""
        with pytest.raises(Exception, match="at least one rule") as info:
            LoopConfig(completion="rules")
        assert getattr(info.value, "field", None) == "completion"


class TestHookVerdicts:
    def test_escalate(self) -> None:
        """A hook answering escalate escalates with escalated_by_hook."""
        d = decide(make_evidence(hook=hook("escalate", "too risky")), DEFAULT)
        assert (d.signal, d.state, d.terminal_reason) == (
            Signal.ESCALATE,
            State.ESCALATED,
            TerminalReason.ESCALATED_BY_HOOK,
        )

    def test_complete_is_a_claim_accepted_when_rules_pass(self) -> None:
        """A hook answering complete is a completion claim: accepted when rules pass."""
        d = decide(make_evidence(hook=hook("complete", "looks done")), DEFAULT)
        assert d.signal is Signal.COMPLETE
        assert "my-hook" in d.reason

    def test_complete_is_subject_to_the_policy(self) -> None:
        """A hook's complete claim is rejected under promise_and_rules when rules fail."""
        d = decide(make_evidence(report=FAIL, hook=hook("complete")), DEFAULT)
        assert d.signal is Signal.CONTINUE
        assert "not accepted" in d.feedback[0]

    def test_complete_under_promise_policy_is_trusted(self) -> None:
        """Under 'promise' a hook's complete claim is trusted like a promise."""
        config = LoopConfig(completion="promise")
        assert decide(make_evidence(report=FAIL, hook=hook("complete")), config).signal is (
            Signal.COMPLETE
        )

    def test_continue_adds_reason_and_next_prompt(self) -> None:
        """A continue verdict adds its reason to the feedback and carries next_prompt."""
        d = decide(
            make_evidence(report=FAIL, hook=hook("continue", "add tests", "Now write tests")),
            DEFAULT,
        )
        assert d.signal is Signal.CONTINUE
        assert d.next_prompt == "Now write tests"
        assert d.feedback[-1] == "Stop hook my-hook: add tests"

    def test_continue_without_reason_adds_no_feedback(self) -> None:
        """A continue verdict with no reason adds nothing."""
        d = decide(make_evidence(report=PASS, hook=hook("continue")), DEFAULT)
        assert d.feedback == ()
        assert d.next_prompt is None

    def test_continue_does_not_block_a_promise(self) -> None:
        """A continue verdict does not stop an accepted COMPLETE promise."""
        d = decide(make_evidence(promises=[COMPLETE], hook=hook("continue", "meh")), DEFAULT)
        assert d.signal is Signal.COMPLETE


class TestStopChecks:
    def veto(self, reason: str = "tests not run") -> StopCheck:
        return StopCheck("tests-green", False, reason)

    def test_veto_turns_complete_into_continue_with_feedback(self) -> None:
        """A veto turns an accepted completion into CONTINUE with the veto as feedback."""
        d = decide(make_evidence(promises=[COMPLETE], stop_checks=[self.veto()]), DEFAULT)
        assert (d.signal, d.state, d.terminal_reason) == (Signal.CONTINUE, State.EXECUTING, None)
        assert d.feedback[0] == "Completion was vetoed by tests-green: tests not run"
        assert "vetoed" in d.reason

    def test_veto_under_rules_policy(self) -> None:
        """A veto also stops a rules-policy completion."""
        config = LoopConfig(completion="rules", rules=TWO_RULES)
        d = decide(make_evidence(report=PASS, stop_checks=[self.veto()]), config)
        assert d.signal is Signal.CONTINUE

    def test_vetoed_on_the_last_iteration_escalates(self) -> None:
        """A vetoed completion on the last iteration stops at the limit."""
        d = decide(make_evidence(5, 5, promises=[COMPLETE], stop_checks=[self.veto()]), DEFAULT)
        assert d.terminal_reason is TerminalReason.MAX_ITERATIONS

    def test_veto_does_not_affect_blocked(self) -> None:
        """Vetoes apply to completion only: a BLOCKED promise still blocks."""
        d = decide(make_evidence(promises=[BLOCKED], stop_checks=[self.veto()]), DEFAULT)
        assert d.signal is Signal.BLOCKED

    def test_allowed_checks_let_it_complete(self) -> None:
        """Checks that allow the stop do not change the completion."""
        d = decide(
            make_evidence(promises=[COMPLETE], stop_checks=[StopCheck("a", True, "ok")]),
            DEFAULT,
        )
        assert d.signal is Signal.COMPLETE
        assert not d.forced

    def test_forced_checks_mark_the_decision_forced(self) -> None:
        """A stop forced past vetoes completes and the decision says it was forced."""
        forced = StopCheck("loopwarden", True, "stop allowed after 3 vetoes", forced=True)
        d = decide(make_evidence(promises=[COMPLETE], stop_checks=[forced]), DEFAULT)
        assert (d.signal, d.forced) == (Signal.COMPLETE, True)
        assert "forced" in d.reason
        assert "stop allowed after 3 vetoes" in d.reason

    def test_veto_without_a_claim_changes_nothing(self) -> None:
        """A veto recorded when nothing claimed completion adds no veto feedback."""
        d = decide(make_evidence(report=FAIL, stop_checks=[self.veto()]), DEFAULT)
        assert not any("vetoed" in f for f in d.feedback)


class TestFeedback:
    def test_failed_and_errored_rules_become_feedback(self) -> None:
        """Each rule that did not pass gives one feedback line, failed and errored worded apart."""
        r = report("failed", "passed", "errored", messages=["bad", "good", "no such file"])
        assert rule_feedback(r) == [
            "Rule 'r0' failed: bad",
            "Rule 'r2' could not be evaluated: no such file",
        ]
        d = decide(make_evidence(report=r), DEFAULT)
        assert d.feedback == tuple(rule_feedback(r))

    def test_feedback_bounded_by_feedback_limit(self) -> None:
        """Long failure messages are cut so the feedback stays within feedback_limit."""
        r = report(*["failed"] * 10, messages=["x" * 1000] * 10)
        d = decide(make_evidence(report=r), LoopConfig(feedback_limit=2500))
        assert d.feedback[-1].endswith("feedback items omitted)")
        assert sum(len(f) for f in d.feedback[:-1]) <= 2500
        assert len(d.feedback) < 10

    def test_feedback_total_never_exceeds_the_limit(self) -> None:
        """The whole feedback, omission note included, fits within feedback_limit."""
        r = report(*["failed"] * 10, messages=["x" * 1000] * 10)
        d = decide(make_evidence(report=r), LoopConfig(feedback_limit=2500))
        assert sum(len(f) for f in d.feedback) <= 2500

    @given(st.lists(st.text(max_size=500), max_size=20), st.integers(200, 3000))
    def test_bound_feedback_keeps_items_within_the_limit(
        self, items: list[str], limit: int
    ) -> None:
        """Kept items total at most the limit; one short note says how many were left out."""
        out = bound_feedback(items, limit)
        kept = [f for f in out if not f.endswith("feedback items omitted)")]
        assert sum(len(f) for f in kept) <= limit
        assert len(out) <= len([i for i in items if i])
        assert sum(len(f) for f in out) <= limit + 60

    def test_short_feedback_is_kept_whole(self) -> None:
        """Feedback within the limit is unchanged, empty items dropped."""
        assert bound_feedback(["a", "", "b"], 200) == ("a", "b")

    def test_completion_carries_no_feedback(self) -> None:
        """A completed decision has no feedback."""
        assert decide(make_evidence(promises=[COMPLETE]), DEFAULT).feedback == ()


class TestCustomSafetyGuard:
    def test_a_custom_guard_replaces_the_default(self) -> None:
        """decide(..., safety=guard) uses the given guard instead of the config's."""
        d = decide(make_evidence(2, 15), DEFAULT, safety=MaxIterations(2))
        assert d.terminal_reason is TerminalReason.MAX_ITERATIONS
        d = decide(make_evidence(15, 15), DEFAULT, safety=MaxIterations(100))
        assert d.signal is Signal.CONTINUE

    def test_a_plain_function_guard(self) -> None:
        """A function guard's trip becomes an escalation with its reason."""

        def too_low(evidence: Evidence) -> bool:
            return evidence.score < 60

        safety = guard(too_low, "score below 60")
        d = decide(make_evidence(report=FAIL), DEFAULT, safety=safety)
        assert (d.signal, d.terminal_reason, d.reason) == (
            Signal.ESCALATE,
            TerminalReason.GUARD,
            "score below 60",
        )

    def test_completion_still_wins_over_a_custom_guard(self) -> None:
        """A custom guard never overrides an accepted completion."""
        d = decide(make_evidence(promises=[COMPLETE]), DEFAULT, safety=guard(lambda e: True))
        assert d.signal is Signal.COMPLETE


class TestDecisionRecord:
    def test_round_trip(self) -> None:
        """A decision rebuilt from its JSON form equals the original."""
        d = decide(make_evidence(report=FAIL, hook=hook("continue", "x", "y")), DEFAULT)
        assert Decision.from_dict(d.to_dict()) == d

    def test_score_is_the_reports(self) -> None:
        """The decision records the report's score."""
        assert decide(make_evidence(report=FAIL), DEFAULT).score == 50.0


class TestProperties:
    @given(configs_and_evidence())
    def test_deterministic_and_total(self, pair: tuple[LoopConfig, Evidence]) -> None:
        """decide never raises and gives the same decision for the same evidence."""
        config, evidence = pair
        first = decide(evidence, config)
        assert decide(evidence, config) == first
        assert decide(Evidence.from_dict(evidence.to_dict()), config) == first

    @given(configs_and_evidence())
    def test_terminal_reason_iff_not_continue(self, pair: tuple[LoopConfig, Evidence]) -> None:
        """terminal_reason is set exactly when the signal is not CONTINUE."""
        d = decide(pair[1], pair[0])
        assert (d.terminal_reason is None) == (d.signal is Signal.CONTINUE)
        assert d.terminal == (d.signal is not Signal.CONTINUE)
        assert d.iteration == pair[1].iteration

    @given(configs_and_evidence())
    def test_signal_matches_state(self, pair: tuple[LoopConfig, Evidence]) -> None:
        """Each signal goes with its state."""
        d = decide(pair[1], pair[0])
        expected = {
            Signal.CONTINUE: State.EXECUTING,
            Signal.COMPLETE: State.COMPLETED,
            Signal.BLOCKED: State.BLOCKED,
            Signal.ESCALATE: State.ESCALATED,
        }
        assert d.state is expected[d.signal]

    @given(
        configs().flatmap(
            lambda c: st.tuples(
                st.just(c),
                configs_and_evidence(st.just(c)),
                promises(c.promise_words, kinds=[Signal.BLOCKED]),
            )
        )
    )
    def test_blocked_promise_always_wins(
        self, drawn: tuple[LoopConfig, tuple[LoopConfig, Evidence], Promise]
    ) -> None:
        """Whatever else the evidence holds, a BLOCKED promise blocks."""
        config, (_, evidence), blocked = drawn
        evidence = replace(evidence, promises=(*evidence.promises, blocked))
        d = decide(evidence, config)
        assert (d.signal, d.terminal_reason) == (Signal.BLOCKED, TerminalReason.BLOCKED_BY_AGENT)

    @given(configs_and_evidence(), st.integers(0, 5))
    def test_max_iterations_always_stops(
        self, pair: tuple[LoopConfig, Evidence], beyond: int
    ) -> None:
        """At i >= max the loop stops, for max_iterations unless an earlier rule fired first."""
        config, evidence = pair
        at_limit = replace(evidence, iteration=config.max_iterations + beyond)
        d = decide(at_limit, config)
        assert d.signal is not Signal.CONTINUE
        earlier = CircuitBreaker(config.circuit_breaker_threshold) | Regression(
            config.regression_window, config.regression_min_drop
        )
        without_limit = decide(at_limit, config, safety=earlier)
        if without_limit.signal is Signal.CONTINUE:
            assert d.terminal_reason is TerminalReason.MAX_ITERATIONS
        else:
            assert d == without_limit

    @given(configs_and_evidence())
    def test_feedback_is_bounded(self, pair: tuple[LoopConfig, Evidence]) -> None:
        """Feedback stays within feedback_limit plus one short omission note."""
        config, evidence = pair
        d = decide(evidence, config)
        assert sum(len(f) for f in d.feedback) <= config.feedback_limit + 60

    @given(validation_reports(), st.integers(0, 10), st.integers(1, 10))
    def test_next_counters(self, r: ValidationReport, previous: int, keep: int) -> None:
        """Failures reset on a pass and count up otherwise; scores end with this report's."""
        failures, scores = next_counters(previous, (1.0, 2.0), r, keep)
        assert failures == (0 if r.passed else previous + 1)
        assert scores[-1] == r.score
        assert len(scores) <= keep
