"""Replay: re-decide a recorded loop under other guard settings, from its stored evidence.

No agent runs and no command runs: each recorded iteration's evidence (its validation report,
promises, hook verdict and stop checks) is fed, in order, to the pure ``decide`` under the
new configuration, with the counters (consecutive failures, score window) recomputed from the
reports. The result says, iteration by iteration, where the outcome would have differed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loopwarden.decide import decide, next_counters
from loopwarden.errors import ConfigError
from loopwarden.model import JSON, Decision, Evidence, LoopConfig, Signal

__all__ = ["GUARD_FIELDS", "ReplayResult", "ReplayStep", "replay_decisions"]

# The settings replay may change: everything that decides, nothing that runs.
GUARD_FIELDS = frozenset(
    {
        "max_iterations",
        "circuit_breaker_threshold",
        "regression_window",
        "regression_min_drop",
        "completion",
        "completion_promises",
        "blocked_promises",
        "escalate_promises",
        "max_stop_retries",
    }
)


@dataclass(frozen=True, slots=True)
class ReplayStep:
    """One iteration: the decision recorded, and the one the new settings give."""

    iteration: int
    original: Decision
    replayed: Decision

    @property
    def differs(self) -> bool:
        return (self.original.signal, self.original.terminal_reason) != (
            self.replayed.signal,
            self.replayed.terminal_reason,
        )

    def to_dict(self) -> JSON:
        return {
            "iteration": self.iteration,
            "original": self.original.to_dict(),
            "replayed": self.replayed.to_dict(),
            "differs": self.differs,
        }


def _outcome(decision: Decision | None, *, gerund: bool = False) -> str:
    if decision is None:
        return "continuing" if gerund else "continued"
    if decision.signal is Signal.COMPLETE:
        verb = "completing" if gerund else "completed"
        return f"{verb} at iteration {decision.iteration}"
    reason = decision.terminal_reason.value if decision.terminal_reason else "?"
    if decision.signal is Signal.BLOCKED:
        verb = "being blocked" if gerund else "been blocked"
    else:
        verb = "escalating" if gerund else "escalated"
    return f"{verb} ({reason}) at iteration {decision.iteration}"


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """Side by side: the recorded decisions and the replayed ones, and a one-line summary."""

    loop_id: str
    overrides: Mapping[str, Any]
    steps: tuple[ReplayStep, ...]
    original_end: Decision | None
    replayed_end: Decision | None
    ran_out: bool

    @property
    def differs(self) -> bool:
        return any(s.differs for s in self.steps)

    @property
    def first_difference(self) -> ReplayStep | None:
        return next((s for s in self.steps if s.differs), None)

    def summary(self) -> str:
        """One sentence: what would have happened instead."""
        settings = ", ".join(f"{k}={v}" for k, v in sorted(self.overrides.items())) or "no changes"
        original = _outcome(self.original_end, gerund=True)
        if not self.differs:
            return f"with {settings} this loop would have had the same outcome ({original})"
        if self.ran_out:
            last = self.steps[-1].iteration if self.steps else 0
            return (
                f"with {settings} this loop would have continued past iteration {last}, where "
                f"its recorded history ends, instead of {original}"
            )
        replayed = _outcome(self.replayed_end)
        return f"with {settings} this loop would have {replayed} instead of {original}"

    def to_dict(self) -> JSON:
        return {
            "loop_id": self.loop_id,
            "overrides": dict(self.overrides),
            "steps": [s.to_dict() for s in self.steps],
            "original_end": self.original_end.to_dict() if self.original_end else None,
            "replayed_end": self.replayed_end.to_dict() if self.replayed_end else None,
            "ran_out": self.ran_out,
            "differs": self.differs,
            "summary": self.summary(),
        }


def override_config(config: LoopConfig, overrides: Mapping[str, Any]) -> LoopConfig:
    """The config with guard settings changed; other fields cannot be replayed."""
    unknown = sorted(set(overrides) - GUARD_FIELDS)
    if unknown:
        raise ConfigError(
            unknown[0],
            "replay can change only guard settings: " + ", ".join(sorted(GUARD_FIELDS)),
        )
    return config.with_changes(**overrides)


def replay_decisions(
    loop_id: str,
    config: LoopConfig,
    overrides: Mapping[str, Any],
    recorded: Sequence[tuple[Evidence, Decision]],
) -> ReplayResult:
    """Re-decide each recorded ``(evidence, decision)`` under ``config`` + ``overrides``."""
    new_config = override_config(config, overrides)
    words = new_config.promise_words
    failures = 0
    scores: tuple[float, ...] = ()
    steps: list[ReplayStep] = []
    replayed_end: Decision | None = None
    for evidence, original in recorded:
        failures, scores = next_counters(failures, scores, evidence.report, 50)
        promises = tuple(p for p in evidence.promises if words.get(p.word) is p.kind)
        again = replace(
            evidence,
            max_iterations=new_config.max_iterations,
            consecutive_failures=failures,
            scores=scores,
            promises=promises,
        )
        decision = decide(again, new_config)
        steps.append(ReplayStep(evidence.iteration, original, decision))
        if decision.terminal:
            replayed_end = decision
            break
    # The recorded outcome is the first stop; a reopened loop's later history is what the
    # replay may reach when the new settings would not have stopped it there.
    original_end = next((d for _e, d in recorded if d.terminal), None)
    ran_out = replayed_end is None and bool(recorded)
    return ReplayResult(loop_id, dict(overrides), tuple(steps), original_end, replayed_end, ran_out)
