"""Safety guards as pure functions of the evidence, and how they compose."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwarden import (
    CircuitBreaker,
    ConfigError,
    Evidence,
    Guard,
    LoopConfig,
    MaxIterations,
    Regression,
    TerminalReason,
    Trip,
    guard,
    safety_guard,
)
from loopwarden.guards import AllOf, AnyOf, FunctionGuard, as_guard
from loopwarden.testing import evidence, score_sequences


def ev(
    iteration: int = 1,
    max_iterations: int = 15,
    failures: int = 0,
    scores: tuple[float, ...] = (),
) -> Evidence:
    return Evidence(
        iteration=iteration,
        max_iterations=max_iterations,
        consecutive_failures=failures,
        scores=scores,
    )


class TestMaxIterations:
    @pytest.mark.parametrize(
        ("iteration", "max_iterations", "trips"),
        [(1, 15, False), (14, 15, False), (15, 15, True), (16, 15, True), (1, 1, True)],
    )
    def test_trips_at_the_limit(self, iteration: int, max_iterations: int, trips: bool) -> None:
        """Trips when the decided iteration is >= the loop's max_iterations."""
        assert MaxIterations()(ev(iteration, max_iterations)) is trips

    def test_explicit_limit_overrides_the_loops(self) -> None:
        """An explicit limit is used instead of the evidence's max_iterations."""
        assert MaxIterations(3)(ev(3, 15))
        assert not MaxIterations(4)(ev(3, 3))

    def test_trip_reason(self) -> None:
        """The trip says max_iterations and the count."""
        trip = MaxIterations().check(ev(5, 5))
        assert trip is not None
        assert trip.terminal_reason is TerminalReason.MAX_ITERATIONS
        assert "5/5" in trip.reason

    @pytest.mark.parametrize("limit", [0, -3, True])
    def test_invalid_limit(self, limit: int) -> None:
        """A limit below 1 is a ConfigError naming max_iterations."""
        with pytest.raises(ConfigError, match="max_iterations"):
            MaxIterations(limit)


class TestCircuitBreaker:
    def test_does_not_trip_below_the_threshold(self) -> None:
        """threshold-1 consecutive failures do not trip."""
        assert not CircuitBreaker(3)(ev(failures=2))

    def test_trips_exactly_at_the_threshold(self) -> None:
        """Exactly threshold consecutive failures trip, with circuit_breaker as the reason."""
        trip = CircuitBreaker(3).check(ev(failures=3))
        assert trip is not None
        assert trip.terminal_reason is TerminalReason.CIRCUIT_BREAKER
        assert "3 consecutive" in trip.reason

    def test_threshold_of_one(self) -> None:
        """With threshold 1 the first failure trips."""
        assert CircuitBreaker(1)(ev(failures=1))
        assert not CircuitBreaker(1)(ev(failures=0))

    @pytest.mark.parametrize("threshold", [0, -1, True])
    def test_invalid_threshold(self, threshold: int) -> None:
        """A threshold below 1 is a ConfigError naming the field."""
        with pytest.raises(ConfigError, match="circuit_breaker_threshold"):
            CircuitBreaker(threshold)


class TestRegression:
    def test_strictly_falling_with_a_big_drop_trips(self) -> None:
        """Each of the last window scores lower than the one before, dropping > min_drop."""
        trip = Regression(3, 10).check(ev(scores=(90, 80, 70)))
        assert trip is not None
        assert trip.terminal_reason is TerminalReason.REGRESSION

    def test_a_drop_equal_to_the_minimum_does_not_trip(self) -> None:
        """The drop must be strictly greater than min_drop."""
        assert not Regression(3, 10)(ev(scores=(90, 85, 80)))
        assert Regression(3, 10)(ev(scores=(90, 85, 79.9)))

    def test_a_flat_step_does_not_trip(self) -> None:
        """An equal pair of scores breaks the strictly falling run."""
        assert not Regression(3, 10)(ev(scores=(90, 90, 50)))
        assert not Regression(3, 10)(ev(scores=(90, 50, 50)))

    def test_a_rise_does_not_trip(self) -> None:
        """A score that rises within the window does not trip."""
        assert not Regression(3, 10)(ev(scores=(90, 95, 50)))

    def test_needs_a_full_window(self) -> None:
        """Fewer scores than the window never trip."""
        assert not Regression(3, 0)(ev(scores=(90, 10)))
        assert not Regression(3, 0)(ev(scores=()))

    def test_only_the_last_window_counts(self) -> None:
        """Older scores before the window are ignored."""
        assert Regression(3, 10)(ev(scores=(0, 100, 90, 80, 70)))
        assert not Regression(3, 10)(ev(scores=(100, 90, 80, 80)))

    def test_zero_min_drop(self) -> None:
        """With min_drop 0 any strictly falling window trips."""
        assert Regression(2, 0)(ev(scores=(50, 49.5)))

    @given(score_sequences(min_size=2, falling=False), st.integers(2, 6), st.floats(0, 50))
    def test_trips_iff_strictly_falling_and_dropped_enough(
        self, scores: tuple[float, ...], window: int, min_drop: float
    ) -> None:
        """Trips exactly when the last window is strictly falling with drop > min_drop."""
        recent = scores[-window:]
        expected = (
            len(recent) == window
            and all(b < a for a, b in pairwise(recent))
            and recent[0] - recent[-1] > min_drop
        )
        assert Regression(window, min_drop)(ev(scores=scores)) is expected

    @given(score_sequences(min_size=3, falling=True))
    def test_strictly_falling_sequences(self, scores: tuple[float, ...]) -> None:
        """A strictly falling window trips whenever its drop exceeds min_drop."""
        window = len(scores)
        drop = scores[0] - scores[-1]
        assert Regression(window, max(drop - 1, 0))(ev(scores=scores)) is (drop > 0)
        assert not Regression(window, drop)(ev(scores=scores))

    def test_invalid_window(self) -> None:
        """A window below 2 is a ConfigError naming regression_window."""
        with pytest.raises(ConfigError, match="regression_window"):
            Regression(1)

    def test_invalid_min_drop(self) -> None:
        """A negative min_drop is a ConfigError naming regression_min_drop."""
        with pytest.raises(ConfigError, match="regression_min_drop"):
            Regression(3, -1)


def always(evidence: Evidence) -> bool:
    return True


def never(evidence: Evidence) -> bool:
    return False


class TestComposition:
    def test_or_trips_when_either_trips(self) -> None:
        """a | b trips when either trips."""
        either = CircuitBreaker(3) | MaxIterations(5)
        assert isinstance(either, AnyOf)
        assert either(ev(iteration=5))
        assert either(ev(failures=3))
        assert not either(ev(iteration=4, failures=2))

    def test_or_first_trip_wins(self) -> None:
        """With several trips the first member's reason is used."""
        both = ev(iteration=5, failures=3)
        first = (CircuitBreaker(3) | MaxIterations(5)).check(both)
        second = (MaxIterations(5) | CircuitBreaker(3)).check(both)
        assert first is not None
        assert second is not None
        assert first.terminal_reason is TerminalReason.CIRCUIT_BREAKER
        assert second.terminal_reason is TerminalReason.MAX_ITERATIONS

    def test_and_trips_only_when_all_trip(self) -> None:
        """a & b trips only when both trip; the reasons are joined."""
        both = CircuitBreaker(2) & MaxIterations(5)
        assert isinstance(both, AllOf)
        assert not both(ev(iteration=5))
        assert not both(ev(failures=2))
        trip = both.check(ev(iteration=5, failures=2))
        assert trip is not None
        assert trip.terminal_reason is TerminalReason.CIRCUIT_BREAKER
        assert " and " in trip.reason

    def test_chains_flatten(self) -> None:
        """a | b | c is one AnyOf of three; a & b & c one AllOf of three."""
        any3 = MaxIterations() | CircuitBreaker(3) | Regression(3, 10)
        all3 = MaxIterations() & CircuitBreaker(3) & Regression(3, 10)
        assert isinstance(any3, AnyOf)
        assert isinstance(all3, AllOf)
        assert len(any3.guards) == len(all3.guards) == 3

    def test_plain_functions_compose_on_either_side(self) -> None:
        """A plain function of the evidence is accepted as a guard on either side."""
        assert (MaxIterations(100) | always)(ev())
        assert (always | MaxIterations(100))(ev())
        assert not (MaxIterations(100) & always)(ev())
        assert (MaxIterations(1) & always)(ev())
        assert not (never & MaxIterations(1))(ev())

    def test_function_guard_reason(self) -> None:
        """A bare function trips with reason 'guard' and its name."""
        trip = as_guard(always).check(ev())
        assert trip == Trip(TerminalReason.GUARD, "guard always fired")

    def test_guard_factory(self) -> None:
        """guard() records the given reason and terminal reason."""
        g = guard(always, "too expensive", TerminalReason.REGRESSION)
        assert isinstance(g, FunctionGuard)
        assert g.check(ev()) == Trip(TerminalReason.REGRESSION, "too expensive")

    def test_as_guard_rejects_non_callables(self) -> None:
        """Something neither a guard nor callable is a TypeError."""
        with pytest.raises(TypeError, match="Guard or a callable"):
            as_guard(42)  # type: ignore[arg-type]

    def test_custom_guard_subclass(self) -> None:
        """A Guard subclass composes like the built-in ones."""

        class OddIteration(Guard):
            def check(self, evidence: Evidence) -> Trip | None:
                if evidence.iteration % 2:
                    return Trip(TerminalReason.GUARD, "odd")
                return None

        combined = OddIteration() | CircuitBreaker(3)
        assert combined(ev(iteration=3))
        assert not combined(ev(iteration=2))

    def test_repr(self) -> None:
        """Composed guards have a readable repr."""
        assert repr(MaxIterations() | CircuitBreaker(3)) == "MaxIterations() | CircuitBreaker(3)"
        assert repr(MaxIterations(5) & never) == "(MaxIterations(5) & guard(never))"
        assert repr(Regression(3, 10)) == "Regression(window=3, min_drop=10)"


class TestSafetyGuard:
    def test_config_values_are_used(self) -> None:
        """safety_guard(config) uses the config's threshold, window and min drop."""
        config = LoopConfig(
            max_iterations=10,
            circuit_breaker_threshold=2,
            regression_window=2,
            regression_min_drop=5,
        )
        safety = safety_guard(config)
        assert safety(ev(failures=2, max_iterations=10))
        assert safety(ev(scores=(50, 44), max_iterations=10))
        assert not safety(ev(scores=(50, 45), max_iterations=10))
        assert safety(ev(iteration=10, max_iterations=10))
        assert not safety(ev(iteration=9, failures=1, max_iterations=10))

    def test_precedence(self) -> None:
        """Breaker before regression before max iterations."""
        config = LoopConfig(max_iterations=3, circuit_breaker_threshold=3)
        all_three = ev(iteration=3, max_iterations=3, failures=3, scores=(90, 50, 0))
        no_breaker = ev(iteration=3, max_iterations=3, failures=2, scores=(90, 50, 0))
        reasons = [
            trip.terminal_reason
            for trip in (
                safety_guard(config).check(all_three),
                safety_guard(config).check(no_breaker),
                safety_guard(config).check(ev(iteration=3, max_iterations=3)),
            )
            if trip is not None
        ]
        assert reasons == [
            TerminalReason.CIRCUIT_BREAKER,
            TerminalReason.REGRESSION,
            TerminalReason.MAX_ITERATIONS,
        ]

    def test_max_iterations_follows_the_live_limit(self) -> None:
        """The default MaxIterations reads the evidence's max_iterations, which may change."""
        safety = safety_guard(LoopConfig(max_iterations=3))
        assert safety(ev(iteration=3, max_iterations=3))
        assert not safety(ev(iteration=3, max_iterations=8))

    @given(evidence())
    def test_guards_are_pure(self, e: Evidence) -> None:
        """Checking the same evidence twice gives the same trip."""
        g = MaxIterations() | CircuitBreaker(2) | Regression(3, 10)
        assert g.check(e) == g.check(e)
