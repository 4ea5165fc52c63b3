"""loopwarden.testing.LoopHarness: the engine passes its own invariants, and broken
properties are caught."""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st

from loopwarden import Decision, Evidence, LoopConfig, Signal
from loopwarden.testing import LoopHarness


class DefaultHarness(LoopHarness):
    """The harness as shipped, on a short budget."""

    def make_config(self) -> LoopConfig:
        return LoopConfig(max_iterations=4, circuit_breaker_threshold=2)

    def check_decision(self, decision: Decision, evidence: Evidence) -> None:
        """Under promise_and_rules, a completion always comes with every rule passing."""
        if decision.signal is Signal.COMPLETE:
            assert evidence.report.passed


DefaultHarness.TestCase.settings = settings(max_examples=25, stateful_step_count=10)
TestEngineUnderTheHarness = DefaultHarness.TestCase


class NeverCompletes(LoopHarness):
    """A property that is false: the harness must find a completing loop."""

    def output_strategy(self) -> st.SearchStrategy[str]:
        return st.just("all done <promise>COMPLETE</promise>")

    def check_decision(self, decision: Decision, evidence: Evidence) -> None:
        assert decision.signal is not Signal.COMPLETE, "a loop completed"


class TestTheHarnessCatchesViolations:
    def test_a_false_property_fails(self) -> None:
        """A subclass whose property does not hold makes its TestCase fail."""
        # Finding the counterexample is the point; shrinking it would only cost time.
        NeverCompletes.TestCase.settings = settings(
            max_examples=60,
            stateful_step_count=10,
            database=None,
            phases=[Phase.generate],
            derandomize=True,
        )
        with pytest.raises(AssertionError, match="a loop completed"):
            NeverCompletes.TestCase("runTest").runTest()
