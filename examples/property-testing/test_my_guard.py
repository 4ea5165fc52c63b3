"""Property-test a custom guard and a custom stop hook with loopwarden.testing.

Run from the repository root (needs the dev extra: hypothesis and pytest):

    python -m pytest examples/property-testing -q

The guard under test: "stop after two iterations that both score below 50". The stop hook
under test: "escalate once the agent has claimed completion three times without passing".
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis.stateful import invariant

from loopwarden import (
    Decision,
    Evidence,
    LoopConfig,
    LoopEngine,
    Signal,
    TerminalReason,
    decide,
    guard,
    safety_guard,
)
from loopwarden.hooks import HookContext, HookResult, define_hook
from loopwarden.model import HookAction
from loopwarden.testing import LoopHarness, configs_and_evidence


def two_low_scores(evidence: Evidence) -> bool:
    """Our guard: the last two scores both below 50."""
    recent = evidence.scores[-2:]
    return len(recent) == 2 and all(s < 50 for s in recent)


LOW_SCORES = guard(two_low_scores, "two iterations in a row scored below 50")


@given(configs_and_evidence())
def test_the_guard_never_overrides_a_block(pair: tuple[LoopConfig, Evidence]) -> None:
    """With our guard added, a BLOCKED promise still blocks: precedence is kept."""
    config, evidence = pair
    decision = decide(evidence, config, safety=safety_guard(config) | LOW_SCORES)
    if evidence.promise(Signal.BLOCKED):
        assert decision.signal is Signal.BLOCKED


@given(configs_and_evidence())
def test_the_guard_only_fires_on_low_scores(pair: tuple[LoopConfig, Evidence]) -> None:
    """When our guard is the reason a loop stopped, its condition really held."""
    config, evidence = pair
    decision = decide(evidence, config, safety=LOW_SCORES | safety_guard(config))
    if decision.terminal_reason is TerminalReason.GUARD:
        assert two_low_scores(evidence)


def three_unbacked_claims(ctx: HookContext) -> HookResult:
    """Our hook: escalate on the third completion claim that the rules did not back."""
    claims = int(ctx.context.get("unbacked_claims", 0))
    if ctx.promised(Signal.COMPLETE) and not ctx.validation_passed:
        claims += 1
    if claims >= 3:
        return HookResult(HookAction.ESCALATE, f"{claims} completion claims without passing")
    return HookResult(HookAction.CONTINUE, checkpoint_data={"unbacked_claims": claims})


define_hook("three-unbacked-claims", three_unbacked_claims)


class UnbackedClaimsHarness(LoopHarness):
    """Drive the engine with random outputs, rule results, restarts and reopens."""

    def make_config(self) -> LoopConfig:
        return LoopConfig(max_iterations=8, circuit_breaker_threshold=8)

    def register_hooks(self, engine: LoopEngine) -> None:
        engine.hooks.register(self.task_id, "three-unbacked-claims")

    def check_decision(self, decision: Decision, evidence: Evidence) -> None:
        """A loop never completes on an iteration whose rules failed."""
        if decision.signal is Signal.COMPLETE:
            assert evidence.report.passed

    @invariant()
    def escalations_by_our_hook_are_explained(self) -> None:
        """Whenever our hook escalated, its reason says how many claims there were."""
        for d in self.decisions:
            if d.terminal_reason is TerminalReason.ESCALATED_BY_HOOK:
                assert "completion claims without passing" in d.reason


UnbackedClaimsHarness.TestCase.settings = settings(max_examples=15, stateful_step_count=12)
TestUnbackedClaims = UnbackedClaimsHarness.TestCase


def test_with_the_pytest_fixture(loopwarden_engine: LoopEngine) -> None:
    """The plugin's loopwarden_engine fixture is a fresh engine on a temporary database."""
    loop = loopwarden_engine.start("T", LoopConfig(max_iterations=1))
    decision = loopwarden_engine.submit(loop.id, "<promise>COMPLETE</promise>")
    assert decision.signal is Signal.COMPLETE
