"""Safety guards: small composable objects, pure functions of the stored evidence.

A guard ``check``s the evidence of one iteration and answers a :class:`Trip` (why the loop
must stop) or None. Guards compose like tenacity's stop conditions::

    MaxIterations() | CircuitBreaker(3) | Regression(window=3, min_drop=10)

``a | b`` trips when either trips (the first one's reason wins); ``a & b`` trips only when
both do. A plain function ``fn(evidence) -> bool`` is accepted wherever a guard is expected.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

from loopwarden.errors import ConfigError
from loopwarden.model import Evidence, LoopConfig, TerminalReason

__all__ = [
    "AllOf",
    "AnyOf",
    "CircuitBreaker",
    "FunctionGuard",
    "Guard",
    "MaxIterations",
    "Regression",
    "Trip",
    "as_guard",
    "guard",
    "safety_guard",
]


@dataclass(frozen=True, slots=True)
class Trip:
    """A guard fired: the terminal reason and a sentence saying why."""

    terminal_reason: TerminalReason
    reason: str


class Guard(ABC):
    """The base of every guard: ``check`` is the logic, ``|`` and ``&`` compose."""

    @abstractmethod
    def check(self, evidence: Evidence) -> Trip | None:
        """A Trip when the loop must stop, else None."""

    def __call__(self, evidence: Evidence) -> bool:
        return self.check(evidence) is not None

    def __or__(self, other: Guard | Callable[[Evidence], bool]) -> Guard:
        return AnyOf((self, as_guard(other)))

    def __ror__(self, other: Callable[[Evidence], bool]) -> Guard:
        return AnyOf((as_guard(other), self))

    def __and__(self, other: Guard | Callable[[Evidence], bool]) -> Guard:
        return AllOf((self, as_guard(other)))

    def __rand__(self, other: Callable[[Evidence], bool]) -> Guard:
        return AllOf((as_guard(other), self))


@dataclass(frozen=True, slots=True)
class AnyOf(Guard):
    """Trips when any member trips; members are checked in order, the first trip wins."""

    guards: tuple[Guard, ...]

    def check(self, evidence: Evidence) -> Trip | None:
        for g in self.guards:
            trip = g.check(evidence)
            if trip is not None:
                return trip
        return None

    def __or__(self, other: Guard | Callable[[Evidence], bool]) -> Guard:
        return AnyOf((*self.guards, as_guard(other)))

    def __repr__(self) -> str:
        return " | ".join(repr(g) for g in self.guards)


@dataclass(frozen=True, slots=True)
class AllOf(Guard):
    """Trips only when every member trips; the first member's terminal reason is used."""

    guards: tuple[Guard, ...]

    def check(self, evidence: Evidence) -> Trip | None:
        trips: list[Trip] = []
        for g in self.guards:
            trip = g.check(evidence)
            if trip is None:
                return None
            trips.append(trip)
        if not trips:
            return None
        return Trip(trips[0].terminal_reason, " and ".join(t.reason for t in trips))

    def __and__(self, other: Guard | Callable[[Evidence], bool]) -> Guard:
        return AllOf((*self.guards, as_guard(other)))

    def __repr__(self) -> str:
        return "(" + " & ".join(repr(g) for g in self.guards) + ")"


@dataclass(frozen=True, slots=True)
class MaxIterations(Guard):
    """Trips when the iteration just decided is the last allowed (``i >= max``).

    Without a ``limit`` it uses the loop's own ``max_iterations``, which can change while the
    loop lives.
    """

    limit: int | None = None

    def __post_init__(self) -> None:
        if self.limit is not None and (isinstance(self.limit, bool) or self.limit < 1):
            raise ConfigError("max_iterations", f"must be >= 1, got {self.limit}")

    def check(self, evidence: Evidence) -> Trip | None:
        limit = self.limit if self.limit is not None else evidence.max_iterations
        if evidence.iteration >= limit:
            return Trip(
                TerminalReason.MAX_ITERATIONS,
                f"reached max iterations ({evidence.iteration}/{limit}) without a verified "
                "completion",
            )
        return None

    def __repr__(self) -> str:
        return f"MaxIterations({'' if self.limit is None else self.limit})"


@dataclass(frozen=True, slots=True)
class CircuitBreaker(Guard):
    """Trips after ``threshold`` consecutive iterations whose validation did not pass."""

    threshold: int = 3

    def __post_init__(self) -> None:
        if isinstance(self.threshold, bool) or self.threshold < 1:
            raise ConfigError("circuit_breaker_threshold", f"must be >= 1, got {self.threshold}")

    def check(self, evidence: Evidence) -> Trip | None:
        if evidence.consecutive_failures >= self.threshold:
            return Trip(
                TerminalReason.CIRCUIT_BREAKER,
                f"circuit breaker: {evidence.consecutive_failures} consecutive failed "
                f"validations (threshold {self.threshold})",
            )
        return None

    def __repr__(self) -> str:
        return f"CircuitBreaker({self.threshold})"


@dataclass(frozen=True, slots=True)
class Regression(Guard):
    """Trips when the last ``window`` scores each fell and dropped more than ``min_drop``."""

    window: int = 3
    min_drop: float = 10.0

    def __post_init__(self) -> None:
        if isinstance(self.window, bool) or self.window < 2:
            raise ConfigError("regression_window", f"must be >= 2, got {self.window}")
        if self.min_drop < 0:
            raise ConfigError("regression_min_drop", f"must be >= 0, got {self.min_drop}")

    def check(self, evidence: Evidence) -> Trip | None:
        recent = evidence.scores[-self.window :]
        if len(recent) < self.window:
            return None
        falling = all(b < a for a, b in pairwise(recent))
        drop = recent[0] - recent[-1]
        if falling and drop > self.min_drop:
            shown = " → ".join(f"{s:g}" for s in recent)
            return Trip(
                TerminalReason.REGRESSION,
                f"quality regression: scores fell {shown} over {self.window} iterations "
                f"(drop {drop:g} > {self.min_drop:g})",
            )
        return None

    def __repr__(self) -> str:
        return f"Regression(window={self.window}, min_drop={self.min_drop:g})"


@dataclass(frozen=True, slots=True)
class FunctionGuard(Guard):
    """A plain predicate of the evidence used as a guard."""

    fn: Callable[[Evidence], bool]
    reason: str = ""
    terminal_reason: TerminalReason = TerminalReason.GUARD

    def check(self, evidence: Evidence) -> Trip | None:
        if self.fn(evidence):
            name = getattr(self.fn, "__name__", "guard")
            return Trip(self.terminal_reason, self.reason or f"guard {name} fired")
        return None

    def __repr__(self) -> str:
        return f"guard({getattr(self.fn, '__name__', self.fn)!s})"


def guard(
    fn: Callable[[Evidence], bool],
    reason: str = "",
    terminal_reason: TerminalReason = TerminalReason.GUARD,
) -> Guard:
    """Make a guard from a predicate, with the reason to record when it fires."""
    return FunctionGuard(fn, reason, terminal_reason)


def as_guard(obj: Guard | Callable[[Evidence], bool]) -> Guard:
    """A Guard as is; a callable wrapped as one."""
    if isinstance(obj, Guard):
        return obj
    if callable(obj):
        return FunctionGuard(obj)
    raise TypeError(f"expected a Guard or a callable of the evidence, got {obj!r}")


def safety_guard(config: LoopConfig) -> Guard:
    """The safety guards of a config in precedence order: breaker, regression, max iterations."""
    return (
        CircuitBreaker(config.circuit_breaker_threshold)
        | Regression(config.regression_window, config.regression_min_drop)
        | MaxIterations()
    )
