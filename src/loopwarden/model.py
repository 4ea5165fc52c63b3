"""Value types: states, signals, configuration, evidence, decisions and the records read back.

Everything here is an immutable value with a plain-JSON form (``to_dict`` / ``from_dict``),
because every one of them is persisted and must come back exactly after a crash.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from loopwarden.errors import ConfigError, CorruptRecordError

if TYPE_CHECKING:
    from loopwarden.rules import Rule

JSON = dict[str, Any]


class State(StrEnum):
    """The states of a loop; values are the lowercase names stored in the database."""

    INITIALIZED = "initialized"
    EXECUTING = "executing"
    VALIDATING = "validating"
    DECIDING = "deciding"
    COMPLETED = "completed"
    BLOCKED = "blocked"
    ESCALATED = "escalated"

    @property
    def terminal(self) -> bool:
        """True for completed, blocked and escalated."""
        return self in TERMINAL_STATES

    @classmethod
    def parse(cls, value: str) -> State:
        """Map a stored name back to a state, loudly: an unknown name names the valid ones."""
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(s.value for s in cls)
            raise CorruptRecordError(
                f"unknown loop state {value!r} in the database; valid states are {valid}"
            ) from None


TERMINAL_STATES = frozenset({State.COMPLETED, State.BLOCKED, State.ESCALATED})


class Signal(StrEnum):
    """What a decision tells the orchestrator to do."""

    CONTINUE = "CONTINUE"
    COMPLETE = "COMPLETE"
    BLOCKED = "BLOCKED"
    ESCALATE = "ESCALATE"


class TerminalReason(StrEnum):
    """Why a loop stopped; "verified complete" and "stopped at the limit" never share a value."""

    COMPLETED = "completed"
    BLOCKED_BY_AGENT = "blocked_by_agent"
    BLOCKED_BY_USER = "blocked_by_user"
    ESCALATED_BY_AGENT = "escalated_by_agent"
    ESCALATED_BY_HOOK = "escalated_by_hook"
    CIRCUIT_BREAKER = "circuit_breaker"
    REGRESSION = "regression"
    MAX_ITERATIONS = "max_iterations"
    GUARD = "guard"


class CompletionPolicy(StrEnum):
    """When a completion claim ends the loop."""

    PROMISE_AND_RULES = "promise_and_rules"
    PROMISE = "promise"
    RULES = "rules"


class RuleStatus(StrEnum):
    """A rule's outcome; ``errored`` means it could not be evaluated at all."""

    PASSED = "passed"
    FAILED = "failed"
    ERRORED = "errored"


class HookAction(StrEnum):
    """What a stop hook answers."""

    COMPLETE = "complete"
    CONTINUE = "continue"
    ESCALATE = "escalate"


@dataclass(frozen=True, slots=True)
class Promise:
    """A promise found in agent output: its kind (COMPLETE/BLOCKED/ESCALATE), word and reason."""

    kind: Signal
    word: str
    reason: str = ""

    def to_dict(self) -> JSON:
        return {"kind": self.kind.value, "word": self.word, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Promise:
        return cls(Signal(data["kind"]), str(data["word"]), str(data.get("reason", "")))


@dataclass(frozen=True, slots=True)
class RuleResult:
    """One rule's result for one iteration."""

    name: str
    status: RuleStatus
    message: str = ""
    duration: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status is RuleStatus.PASSED

    def to_dict(self) -> JSON:
        return {
            "name": self.name,
            "status": self.status.value,
            "message": self.message,
            "duration": round(self.duration, 6),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RuleResult:
        return cls(
            str(data["name"]),
            RuleStatus(data["status"]),
            str(data.get("message", "")),
            float(data.get("duration", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """The results of every rule for one iteration, with the score derived from them."""

    results: tuple[RuleResult, ...] = ()

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def passed_count(self) -> int:
        return sum(1 for r in self.results if r.status is RuleStatus.PASSED)

    @property
    def failed_count(self) -> int:
        return sum(1 for r in self.results if r.status is RuleStatus.FAILED)

    @property
    def errored_count(self) -> int:
        return sum(1 for r in self.results if r.status is RuleStatus.ERRORED)

    @property
    def passed(self) -> bool:
        """True when every rule passed (vacuously true with no rules)."""
        return all(r.passed for r in self.results)

    @property
    def score(self) -> float:
        """``passed/total*100 - errored/total*100``, floored at 0; 100 with no rules."""
        return score_of(self.passed_count, self.errored_count, self.total)

    @property
    def failures(self) -> tuple[RuleResult, ...]:
        return tuple(r for r in self.results if not r.passed)

    def to_dict(self) -> JSON:
        return {
            "results": [r.to_dict() for r in self.results],
            "score": self.score,
            "passed": self.passed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ValidationReport:
        return cls(tuple(RuleResult.from_dict(r) for r in data.get("results", ())))


def score_of(passed: int, errored: int, total: int) -> float:
    """The validation score of DESIGN §2 from counts."""
    if total == 0:
        return 100.0
    return round(max(0.0, passed / total * 100 - errored / total * 100), 4)


@dataclass(frozen=True, slots=True)
class HookVerdict:
    """The combined answer of a task's stop hooks for one iteration."""

    action: HookAction
    reason: str = ""
    next_prompt: str | None = None
    source: str = "hooks"
    checkpoint_data: JSON | None = None

    def to_dict(self) -> JSON:
        return {
            "action": self.action.value,
            "reason": self.reason,
            "next_prompt": self.next_prompt,
            "source": self.source,
            "checkpoint_data": self.checkpoint_data,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HookVerdict:
        return cls(
            HookAction(data["action"]),
            str(data.get("reason", "")),
            data.get("next_prompt"),
            str(data.get("source", "hooks")),
            data.get("checkpoint_data"),
        )


@dataclass(frozen=True, slots=True)
class StopCheck:
    """A completion check's answer when the loop was about to complete (a veto or a pass)."""

    source: str
    allowed: bool
    reason: str = ""
    forced: bool = False

    def to_dict(self) -> JSON:
        return {
            "source": self.source,
            "allowed": self.allowed,
            "reason": self.reason,
            "forced": self.forced,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StopCheck:
        return cls(
            str(data["source"]),
            bool(data["allowed"]),
            str(data.get("reason", "")),
            bool(data.get("forced", False)),
        )


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything a decision depends on, as stored: decide() is a pure function of this."""

    iteration: int
    max_iterations: int
    report: ValidationReport = field(default_factory=ValidationReport)
    promises: tuple[Promise, ...] = ()
    consecutive_failures: int = 0
    scores: tuple[float, ...] = ()
    hook: HookVerdict | None = None
    stop_checks: tuple[StopCheck, ...] = ()

    @property
    def score(self) -> float:
        return self.report.score

    def promise(self, kind: Signal) -> Promise | None:
        """The first promise of the given kind, if any."""
        return next((p for p in self.promises if p.kind is kind), None)

    def to_dict(self) -> JSON:
        return {
            "iteration": self.iteration,
            "max_iterations": self.max_iterations,
            "report": self.report.to_dict(),
            "promises": [p.to_dict() for p in self.promises],
            "consecutive_failures": self.consecutive_failures,
            "scores": list(self.scores),
            "hook": self.hook.to_dict() if self.hook else None,
            "stop_checks": [c.to_dict() for c in self.stop_checks],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Evidence:
        hook = data.get("hook")
        return cls(
            iteration=int(data["iteration"]),
            max_iterations=int(data["max_iterations"]),
            report=ValidationReport.from_dict(data.get("report", {})),
            promises=tuple(Promise.from_dict(p) for p in data.get("promises", ())),
            consecutive_failures=int(data.get("consecutive_failures", 0)),
            scores=tuple(float(s) for s in data.get("scores", ())),
            hook=HookVerdict.from_dict(hook) if hook else None,
            stop_checks=tuple(StopCheck.from_dict(c) for c in data.get("stop_checks", ())),
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """What deciding concluded for one iteration, and the state the loop moved to."""

    signal: Signal
    state: State
    iteration: int
    score: float
    reason: str
    feedback: tuple[str, ...] = ()
    terminal_reason: TerminalReason | None = None
    next_prompt: str | None = None
    passed: bool = False
    forced: bool = False

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    def to_dict(self) -> JSON:
        return {
            "signal": self.signal.value,
            "state": self.state.value,
            "iteration": self.iteration,
            "score": self.score,
            "reason": self.reason,
            "feedback": list(self.feedback),
            "terminal_reason": self.terminal_reason.value if self.terminal_reason else None,
            "next_prompt": self.next_prompt,
            "passed": self.passed,
            "forced": self.forced,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        tr = data.get("terminal_reason")
        return cls(
            signal=Signal(data["signal"]),
            state=State.parse(data["state"]),
            iteration=int(data["iteration"]),
            score=float(data["score"]),
            reason=str(data["reason"]),
            feedback=tuple(str(f) for f in data.get("feedback", ())),
            terminal_reason=TerminalReason(tr) if tr else None,
            next_prompt=data.get("next_prompt"),
            passed=bool(data.get("passed", False)),
            forced=bool(data.get("forced", False)),
        )


def _require_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, f"must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ConfigError(name, f"must be >= {minimum}, got {value}")


def _require_words(name: str, words: object) -> tuple[str, ...]:
    if isinstance(words, str) or not isinstance(words, Sequence) or not words:
        raise ConfigError(name, f"must be a non-empty list of words, got {words!r}")
    out: list[str] = []
    for w in words:
        if not isinstance(w, str) or not w.strip() or not w.strip().replace("_", "").isalnum():
            raise ConfigError(name, f"each promise word must be letters/digits/_, got {w!r}")
        out.append(w.strip().upper())
    return tuple(out)


@dataclass(frozen=True)
class LoopConfig:
    """A loop's guards, rules and promise words. Invalid values raise ConfigError at creation.

    ``completion`` is the completion policy: ``promise_and_rules`` (a COMPLETE promise counts
    only when every rule passes), ``promise`` (trust the promise) or ``rules`` (complete as
    soon as every rule passes). ``workdir`` is where command rules run; the engine fills it
    with the current directory at loop creation so that a resume elsewhere runs the same way.
    """

    max_iterations: int = 15
    circuit_breaker_threshold: int = 3
    regression_window: int = 3
    regression_min_drop: float = 10.0
    completion: CompletionPolicy | str = CompletionPolicy.PROMISE_AND_RULES
    rules: Sequence[Rule] = ()
    completion_promises: Sequence[str] = ("COMPLETE",)
    blocked_promises: Sequence[str] = ("BLOCKED",)
    escalate_promises: Sequence[str] = ("ESCALATE",)
    feedback_limit: int = 4000
    workdir: str | None = None
    max_stop_retries: int = 3

    def __post_init__(self) -> None:
        _require_int("max_iterations", self.max_iterations, 1)
        _require_int("circuit_breaker_threshold", self.circuit_breaker_threshold, 1)
        _require_int("regression_window", self.regression_window, 2)
        _require_int("feedback_limit", self.feedback_limit, 200)
        _require_int("max_stop_retries", self.max_stop_retries, 0)
        drop = self.regression_min_drop
        if isinstance(drop, bool) or not isinstance(drop, int | float) or not math.isfinite(drop):
            raise ConfigError("regression_min_drop", f"must be a number >= 0, got {drop!r}")
        if drop < 0:
            raise ConfigError("regression_min_drop", f"must be >= 0, got {drop}")
        object.__setattr__(self, "regression_min_drop", float(drop))
        try:
            policy = CompletionPolicy(self.completion)
        except ValueError:
            valid = ", ".join(p.value for p in CompletionPolicy)
            raise ConfigError(
                "completion", f"unknown completion policy {self.completion!r}; use one of {valid}"
            ) from None
        object.__setattr__(self, "completion", policy)
        self._check_rules(policy)
        words: dict[str, str] = {}
        for name in ("completion_promises", "blocked_promises", "escalate_promises"):
            parsed = _require_words(name, getattr(self, name))
            for w in parsed:
                if w in words and words[w] != name:
                    raise ConfigError(name, f"promise word {w!r} is also one of {words[w]}")
                words[w] = name
            object.__setattr__(self, name, parsed)
        if self.workdir is not None and not isinstance(self.workdir, str):
            raise ConfigError("workdir", f"must be a directory path, got {self.workdir!r}")

    def _check_rules(self, policy: CompletionPolicy) -> None:
        from loopwarden.rules import Rule

        given: object = self.rules
        if isinstance(given, str | bytes) or not isinstance(given, Sequence):
            raise ConfigError("rules", f"must be a list of rules, got {self.rules!r}")
        seen: set[str] = set()
        for i, rule in enumerate(self.rules):
            if not isinstance(rule, Rule):
                raise ConfigError(
                    f"rules[{i}]",
                    f"must be a rule made by loopwarden.rules (command, pattern, coverage, "
                    f"predicate), got {rule!r}",
                )
            if rule.name in seen:
                raise ConfigError(f"rules[{i}].name", f"duplicate rule name {rule.name!r}")
            seen.add(rule.name)
        object.__setattr__(self, "rules", tuple(self.rules))
        if policy is CompletionPolicy.RULES and not self.rules:
            raise ConfigError(
                "completion",
                "the 'rules' policy completes when every rule passes, so it needs at least "
                "one rule; add rules or use 'promise_and_rules'",
            )

    @property
    def policy(self) -> CompletionPolicy:
        return CompletionPolicy(self.completion)

    @property
    def promise_words(self) -> dict[str, Signal]:
        """Every recognised promise word mapped to its kind."""
        out = dict.fromkeys(self.completion_promises, Signal.COMPLETE)
        out.update(dict.fromkeys(self.blocked_promises, Signal.BLOCKED))
        out.update(dict.fromkeys(self.escalate_promises, Signal.ESCALATE))
        return out

    def with_changes(self, **changes: Any) -> LoopConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def to_dict(self) -> JSON:
        out: JSON = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "rules":
                out["rules"] = [r.to_dict() for r in value]
            elif isinstance(value, tuple):
                out[f.name] = list(value)
            elif isinstance(value, StrEnum):
                out[f.name] = value.value
            else:
                out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoopConfig:
        """Rebuild a config; unknown keys are a ConfigError naming them."""
        from loopwarden.rules import rule_from_dict

        if not isinstance(data, Mapping):
            raise ConfigError("config", f"must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                unknown[0], f"unknown config field; valid fields are {', '.join(sorted(known))}"
            )
        kwargs = dict(data)
        raw_rules = kwargs.get("rules", ())
        if not isinstance(raw_rules, list | tuple):
            raise ConfigError("rules", f"must be a list of rules, got {raw_rules!r}")
        kwargs["rules"] = tuple(rule_from_dict(r, f"rules[{i}]") for i, r in enumerate(raw_rules))
        return cls(**kwargs)


@dataclass(frozen=True, slots=True)
class LoopSnapshot:
    """A loop as stored now: what ``engine.get`` returns."""

    id: str
    task_id: str
    state: State
    iteration: int
    max_iterations: int
    config: LoopConfig
    prompt: str
    current_prompt: str
    context: JSON
    consecutive_failures: int
    scores: tuple[float, ...]
    terminal_reason: TerminalReason | None
    reason: str
    seq: int
    created_at: float
    updated_at: float
    parent_id: str | None = None
    last_decision: Decision | None = None
    metadata: JSON = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    @property
    def last_score(self) -> float | None:
        return self.scores[-1] if self.scores else None

    def to_dict(self) -> JSON:
        return {
            "id": self.id,
            "task_id": self.task_id,
            "state": self.state.value,
            "iteration": self.iteration,
            "max_iterations": self.max_iterations,
            "config": self.config.to_dict(),
            "prompt": self.prompt,
            "current_prompt": self.current_prompt,
            "context": self.context,
            "consecutive_failures": self.consecutive_failures,
            "scores": list(self.scores),
            "last_score": self.last_score,
            "terminal_reason": self.terminal_reason.value if self.terminal_reason else None,
            "reason": self.reason,
            "seq": self.seq,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "parent_id": self.parent_id,
            "last_decision": self.last_decision.to_dict() if self.last_decision else None,
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class IterationRecord:
    """One decided iteration, as ``engine.history`` returns it."""

    loop_id: str
    iteration: int
    prompt: str
    output: str
    files_modified: tuple[str, ...]
    draft: str | None
    report: ValidationReport
    promises: tuple[Promise, ...]
    decision: Decision
    started_at: float
    submitted_at: float
    decided_at: float
    hooks: tuple[JSON, ...] = ()

    @property
    def score(self) -> float:
        return self.decision.score

    @property
    def signal(self) -> Signal:
        return self.decision.signal

    @property
    def reason(self) -> str:
        return self.decision.reason

    def to_dict(self) -> JSON:
        return {
            "loop_id": self.loop_id,
            "iteration": self.iteration,
            "prompt": self.prompt,
            "output": self.output,
            "files_modified": list(self.files_modified),
            "draft": self.draft,
            "report": self.report.to_dict(),
            "promises": [p.to_dict() for p in self.promises],
            "decision": self.decision.to_dict(),
            "score": self.score,
            "signal": self.signal.value,
            "reason": self.reason,
            "started_at": self.started_at,
            "submitted_at": self.submitted_at,
            "decided_at": self.decided_at,
            "hooks": list(self.hooks),
        }


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """One checkpoint: an immutable record of one state entry."""

    loop_id: str
    seq: int
    state: State
    iteration: int
    trigger: str
    created_at: float
    schema_version: int
    data: JSON

    def to_dict(self) -> JSON:
        return {
            "loop_id": self.loop_id,
            "seq": self.seq,
            "state": self.state.value,
            "iteration": self.iteration,
            "trigger": self.trigger,
            "created_at": self.created_at,
            "schema_version": self.schema_version,
            "data": self.data,
        }
