"""Deciding: the precedence of DESIGN §2 as one pure function.

``decide(evidence, config)`` returns a :class:`Decision`; it reads nothing and writes nothing,
so a decision re-applied on resume from the stored evidence is the same decision. In order,
the first that fires wins:

1. a BLOCKED promise                                   → blocked   (blocked_by_agent)
2. an ESCALATE promise / a hook answering escalate     → escalated (escalated_by_agent / _hook)
3. a completion claim the policy accepts, not vetoed   → completed
4. the safety guard (breaker, regression, max iterations by default) → escalated
5. otherwise                                           → executing the next iteration
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from loopwarden.guards import Guard, safety_guard
from loopwarden.model import (
    CompletionPolicy,
    Decision,
    Evidence,
    HookAction,
    LoopConfig,
    Promise,
    RuleStatus,
    Signal,
    State,
    StopCheck,
    TerminalReason,
    ValidationReport,
)

__all__ = ["bound_feedback", "decide", "next_counters", "rule_feedback"]


def next_counters(
    previous_failures: int,
    previous_scores: Sequence[float],
    report: ValidationReport,
    keep: int,
) -> tuple[int, tuple[float, ...]]:
    """The consecutive-failure count and recent scores once this report is counted.

    A failed iteration is one whose validation did not pass; a passing one resets the count.
    Only the last ``keep`` scores are kept: guards look back a bounded window.
    """
    failures = 0 if report.passed else previous_failures + 1
    scores = (*previous_scores, report.score)[-keep:]
    return failures, scores


def rule_feedback(report: ValidationReport) -> list[str]:
    """One feedback line per rule that did not pass."""
    lines = []
    for r in report.failures:
        if r.status is RuleStatus.ERRORED:
            lines.append(f"Rule {r.name!r} could not be evaluated: {r.message}")
        else:
            lines.append(f"Rule {r.name!r} failed: {r.message}")
    return lines


def bound_feedback(items: Iterable[str], limit: int) -> tuple[str, ...]:
    """Keep feedback within ``limit`` characters in all, saying how much was left out."""

    def omitted(count: int) -> str:
        return f"({count} more feedback items omitted)"

    out: list[str] = []
    used = 0
    items = [i for i in items if i]
    for n, item in enumerate(items):
        after = len(items) - n - 1
        room = limit - used - (len(omitted(after)) if after else 0)
        if len(item) <= room:
            out.append(item)
            used += len(item)
            continue
        if room > 40:  # worth keeping the start of this item
            out.append(item[: room - 1] + "…")
            if after:
                out.append(omitted(after))
        elif used + len(omitted(after + 1)) <= limit:
            out.append(omitted(after + 1))
        break
    return tuple(out)


def _completion(
    evidence: Evidence, policy: CompletionPolicy
) -> tuple[bool, str | None, str | None]:
    """(accepted, reason when accepted, feedback when a claim was rejected)."""
    report = evidence.report
    promise = evidence.promise(Signal.COMPLETE)
    hook = evidence.hook if evidence.hook and evidence.hook.action is HookAction.COMPLETE else None
    if promise:
        claim = f"completion promise {promise.word}"
    elif hook:
        claim = f"stop hook {hook.source} answered complete"
        if hook.reason:
            claim += f" ({hook.reason})"
    else:
        claim = ""
    rules_text = f"all {report.total} rules passed" if report.total else "no rules to check"
    if policy is CompletionPolicy.RULES:
        if report.passed:
            return True, f"{rules_text} (policy: rules)", None
        return False, None, None
    if not claim:
        return False, None, None
    if policy is CompletionPolicy.PROMISE:
        return True, f"{claim} accepted (policy: promise)", None
    if report.passed:
        return True, f"{claim} accepted: {rules_text}", None
    failing = report.total - report.passed_count
    return (
        False,
        None,
        f"Your completion claim was not accepted: {failing} of {report.total} validation "
        "rules did not pass. Fix them before claiming completion.",
    )


def _promise_reason(verb: str, promise: Promise) -> str:
    return f"agent {verb} ({promise.word})" + (f": {promise.reason}" if promise.reason else "")


def decide(evidence: Evidence, config: LoopConfig, safety: Guard | None = None) -> Decision:
    """The decision for one iteration, by the precedence of DESIGN §2."""
    report = evidence.report
    score = report.score
    feedback = rule_feedback(report)
    limit = config.feedback_limit

    def stop(signal: Signal, state: State, reason: str, terminal: TerminalReason) -> Decision:
        return Decision(
            signal,
            state,
            evidence.iteration,
            score,
            reason,
            bound_feedback(feedback, limit),
            terminal,
            passed=report.passed,
        )

    blocked = evidence.promise(Signal.BLOCKED)
    if blocked:
        return stop(
            Signal.BLOCKED,
            State.BLOCKED,
            _promise_reason("reported it is blocked", blocked),
            TerminalReason.BLOCKED_BY_AGENT,
        )
    escalate = evidence.promise(Signal.ESCALATE)
    if escalate:
        return stop(
            Signal.ESCALATE,
            State.ESCALATED,
            _promise_reason("asked to escalate", escalate),
            TerminalReason.ESCALATED_BY_AGENT,
        )
    hook = evidence.hook
    if hook and hook.action is HookAction.ESCALATE:
        detail = f": {hook.reason}" if hook.reason else ""
        return stop(
            Signal.ESCALATE,
            State.ESCALATED,
            f"stop hook {hook.source} escalated{detail}",
            TerminalReason.ESCALATED_BY_HOOK,
        )

    accepted, why, rejection = _completion(evidence, config.policy)
    vetoes: list[StopCheck] = [c for c in evidence.stop_checks if not c.allowed]
    if accepted and not vetoes:
        forced = [c for c in evidence.stop_checks if c.forced]
        if forced:
            why = f"{why}; stop forced past {len(forced)} check(s): " + "; ".join(
                f"{c.source}: {c.reason}" for c in forced
            )
        return Decision(
            Signal.COMPLETE,
            State.COMPLETED,
            evidence.iteration,
            score,
            why or "complete",
            (),
            TerminalReason.COMPLETED,
            passed=report.passed,
            forced=bool(forced),
        )
    if rejection:
        feedback.insert(0, rejection)
    if accepted:
        feedback[:0] = [f"Completion was vetoed by {c.source}: {c.reason}" for c in vetoes]

    trip = (safety or safety_guard(config)).check(evidence)
    if trip is not None:
        return stop(Signal.ESCALATE, State.ESCALATED, trip.reason, trip.terminal_reason)

    next_prompt = None
    if hook and hook.action is HookAction.CONTINUE:
        if hook.reason:
            feedback.append(f"Stop hook {hook.source}: {hook.reason}")
        next_prompt = hook.next_prompt
    if accepted:
        reason = "completion vetoed: " + "; ".join(f"{c.source}: {c.reason}" for c in vetoes)
    elif rejection:
        reason = (
            f"completion claim rejected: {report.total - report.passed_count} of "
            f"{report.total} rules did not pass (score {score:g})"
        )
    elif not report.passed:
        reason = (
            f"validation failed: {report.total - report.passed_count} of {report.total} rules "
            f"did not pass (score {score:g})"
        )
    else:
        reason = "validation passed; no completion claim yet"
    return Decision(
        Signal.CONTINUE,
        State.EXECUTING,
        evidence.iteration,
        score,
        reason,
        bound_feedback(feedback, limit),
        next_prompt=next_prompt,
        passed=report.passed,
    )
