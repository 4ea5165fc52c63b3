"""loopwarden as a Model Context Protocol server on stdio: an agent runs its own loop with tools.

``loopwarden mcp`` (or ``python -m loopwarden.integrations.mcp_server [--db URL]``) serves the
iteration tools (``iteration_start``, ``iteration_validate``, ``iteration_next``,
``iteration_complete``, ``iteration_status``, ``checkpoint_resume``) and the stop-hook tools
(``hook_register``, ``hook_evaluate``, ``hook_list``, ``hook_clear``) over the same engine and
database as the CLI and the Python API. Tool and field names are camelCase, as MCP clients
expect; every result is a JSON object (structured content, echoed as text).

How the tools find a loop:

- ``taskId`` names the task's *current* loop: its most recent loop that is not finished, else
  its most recent loop. ``iteration_start`` refuses a task that already has a live loop.
- ``iterationId`` is ``"<loopId>:<iteration>"`` (as ``iteration_start`` and
  ``iteration_validate`` return it) or a bare loop id. With the iteration part,
  ``iteration_validate`` accepts the output only for that very iteration, so a retried call
  cannot hand one output in twice.

The engine decides; the tools only report. ``iteration_validate`` runs the rules, the task's
stop hooks and the guards, and the loop moves at once: to the next iteration on CONTINUE, to a
terminal state otherwise. ``iteration_next`` then answers the iteration the loop is in, and is
an error unless the last decision was CONTINUE; ``iteration_complete`` is an error unless the
loop completed. So no order of calls gets a loop past a guard.

Bad input never stops the server: every tool turns an error into an MCP tool error (a result
with ``isError``) whose message names the field. Logs go to stderr; stdout carries protocol
messages only.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, ParamSpec, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from loopwarden import __version__, rules
from loopwarden.engine import LoopEngine
from loopwarden.errors import ConfigError, LoopNotFoundError, LoopwardenError
from loopwarden.logs import configure_logging, get_logger
from loopwarden.model import (
    JSON,
    Decision,
    Evidence,
    IterationRecord,
    LoopConfig,
    LoopSnapshot,
    Signal,
    State,
    TerminalReason,
    ValidationReport,
)
from loopwarden.process import split_command

__all__ = ["LoopTools", "build_server", "main", "serve"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

# Engine field names as an MCP client knows them.
_FIELDS = {
    "task_id": "taskId",
    "loop_id": "iterationId",
    "max_iterations": "maxIterations",
    "circuit_breaker_threshold": "circuitBreakerThreshold",
    "completion_promises": "completionPromises",
    "blocked_promises": "completionPromises",
    "escalate_promises": "completionPromises",
    "rules": "validationRules",
    "context": "agentContext",
    "output": "agentOutput",
    "draft": "draftContent",
    "draft_type": "draftType",
    "files_modified": "filesModified",
    "prompt": "prompt",
    "metadata": "metadata",
}
_RULE_TYPES = ("command", "content_pattern", "coverage")
_RULE_KEYS = {
    "command": {"type", "name", "config", "description"},
    "content_pattern": {"type", "name", "pattern", "target", "mustMatch", "description"},
    "coverage": {"type", "name", "config", "description"},
}
_TARGETS: dict[str, Literal["output", "draft"]] = {"agent_output": "output", "draft": "draft"}
# iteration_status and checkpoint_resume list at most this many of the latest iterations.
_HISTORY_LIMIT = 100
_NOTES_KEY = "iterationNotes"

_log = logging.getLogger("loopwarden.mcp")


def _camel(field: str) -> str:
    """An engine field path (``rules[2].pattern``) in the tools' vocabulary."""
    head, sep, rest = field.partition(".")
    base, bracket, index = head.partition("[")
    return _FIELDS.get(base, base) + bracket + index + sep + rest


def _tool_errors(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Turn whatever a tool raises into a ToolError the client reads; the server never dies."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        except ToolError:
            raise
        except ConfigError as exc:
            raise ToolError(f"{_camel(exc.field)}: {exc.detail}") from None
        except (LoopwardenError, ValueError, LookupError, TypeError) as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:
            _log.exception("tool %s failed unexpectedly", fn.__name__)
            raise ToolError(
                f"unexpected {type(exc).__name__}: {exc} (details in the server's log)"
            ) from None

    return wrapper


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


def _iteration_id(loop_id: str, iteration: int) -> str:
    return f"{loop_id}:{iteration}"


# ----- rules: the tools' JSON format <-> loopwarden rules --------------------------------------


def _rule_config(raw: Mapping[str, Any], where: str, keys: set[str]) -> Mapping[str, Any]:
    config = raw.get("config")
    if not isinstance(config, Mapping):
        raise ToolError(f"{where}.config: must be an object, got {config!r}")
    unknown = sorted(set(config) - keys)
    if unknown:
        raise ToolError(
            f"{where}.config.{unknown[0]}: unknown field; valid fields are "
            + ", ".join(sorted(keys))
        )
    return config


def _rule_from_json(raw: object, where: str) -> rules.Rule:
    """One rule of ``validationRules``; a wrong shape is a ToolError naming the field."""
    if not isinstance(raw, Mapping):
        raise ToolError(f"{where}: must be an object with type and name, got {raw!r}")
    kind = raw.get("type")
    if kind not in _RULE_TYPES:
        raise ToolError(f"{where}.type: must be one of {', '.join(_RULE_TYPES)}, got {kind!r}")
    unknown = sorted(set(raw) - _RULE_KEYS[kind])
    if unknown:
        raise ToolError(
            f"{where}.{unknown[0]}: unknown field for a {kind} rule; valid fields are "
            + ", ".join(sorted(_RULE_KEYS[kind]))
        )
    name = raw.get("name")
    if not isinstance(name, str):
        raise ToolError(f"{where}.name: must be a string, got {name!r}")
    try:
        if kind == "command":
            config = _rule_config(raw, where, {"command", "timeout"})
            command = config.get("command")
            if isinstance(command, str):
                try:
                    argv = split_command(command)
                except ValueError as exc:
                    raise ToolError(
                        f"{where}.config.command: cannot split {command!r}: {exc}"
                    ) from None
            elif isinstance(command, list) and command and all(isinstance(a, str) for a in command):
                argv = list(command)
            else:
                raise ToolError(
                    f"{where}.config.command: must be a command line or a non-empty list of "
                    f"strings, got {command!r}"
                )
            if not argv:
                raise ToolError(f"{where}.config.command: must not be empty")
            timeout = config.get("timeout", 300)
            return rules.command(name, argv, timeout=timeout)
        if kind == "content_pattern":
            pattern = raw.get("pattern")
            if not isinstance(pattern, str):
                raise ToolError(f"{where}.pattern: must be a regular expression, got {pattern!r}")
            target = raw.get("target", "agent_output")
            if target not in _TARGETS:
                raise ToolError(f"{where}.target: must be agent_output or draft, got {target!r}")
            must_match = raw.get("mustMatch", True)
            if not isinstance(must_match, bool):
                raise ToolError(f"{where}.mustMatch: must be true or false, got {must_match!r}")
            return rules.pattern(name, pattern, must_match=must_match, target=_TARGETS[target])
        config = _rule_config(raw, where, {"minCoverage", "report"})
        minimum: Any = config.get("minCoverage")
        if minimum is None:
            raise ToolError(f"{where}.config.minCoverage: required (a percentage, 0..100)")
        return rules.coverage(name, config.get("report", "coverage.json"), minimum=minimum)
    except ConfigError as exc:
        # rules name a field as rules[<name>].<field>; the client knows it by position.
        leaf = exc.field.rpartition(".")[2]
        if leaf in ("minimum", "report", "timeout", "command"):
            leaf = {"minimum": "minCoverage"}.get(leaf, leaf)
            leaf = f"config.{leaf}"
        elif leaf == "rule":
            leaf = "name"
        raise ToolError(f"{where}.{leaf}: {exc.detail}") from None


def _rule_to_json(rule: rules.Rule) -> JSON:
    """A loopwarden rule in the tools' JSON format."""
    if isinstance(rule, rules.CommandRule):
        argv = rule.argv if isinstance(rule.argv, str) else list(rule.argv)
        return {
            "type": "command",
            "name": rule.name,
            "config": {"command": argv, "timeout": rule.timeout},
        }
    if isinstance(rule, rules.PatternRule):
        return {
            "type": "content_pattern",
            "name": rule.name,
            "pattern": rule.regex,
            "target": "agent_output" if rule.target == "output" else "draft",
            "mustMatch": rule.must_match,
        }
    if isinstance(rule, rules.CoverageRule):
        return {
            "type": "coverage",
            "name": rule.name,
            "config": {"minCoverage": rule.minimum, "report": rule.report},
        }
    return {"type": rule.kind, "name": rule.name}


def _config_to_json(config: LoopConfig) -> JSON:
    return {
        "maxIterations": config.max_iterations,
        "circuitBreakerThreshold": config.circuit_breaker_threshold,
        "completionPromises": list(config.completion_promises),
        "completionPolicy": config.policy.value,
        "regressionWindow": config.regression_window,
        "regressionMinDrop": config.regression_min_drop,
        "validationRules": [_rule_to_json(r) for r in config.rules],
        "workdir": config.workdir,
    }


def _report_to_json(report: ValidationReport) -> JSON:
    return {
        "passed": report.passed,
        "score": report.score,
        "total": report.total,
        "passedCount": report.passed_count,
        "failedCount": report.failed_count,
        "erroredCount": report.errored_count,
        "results": [
            {
                "name": r.name,
                "status": r.status.value,
                "message": r.message,
                "durationMs": round(r.duration * 1000, 3),
            }
            for r in report.results
        ],
    }


def _record_summary(record: IterationRecord) -> JSON:
    decision = record.decision
    return {
        "iterationNumber": record.iteration,
        "completionSignal": decision.signal.value,
        "validationPassed": record.report.passed if record.report.total else decision.passed,
        "score": decision.score,
        "reason": decision.reason,
        "detectedPromise": record.promises[0].word if record.promises else None,
        "decidedAt": _iso(record.decided_at),
    }


def _stopped(snapshot: LoopSnapshot) -> str:
    """Why a finished loop takes no more work, and what a human can do."""
    why = snapshot.terminal_reason.value if snapshot.terminal_reason else snapshot.state.value
    text = f"loop {snapshot.id} of task {snapshot.task_id!r} is {snapshot.state.value} ({why}"
    text += f": {snapshot.reason})" if snapshot.reason else ")"
    if snapshot.state is State.COMPLETED:
        return text + "; call iteration_complete for its summary, or iteration_start for new work"
    return (
        text + "; it takes no more iterations. A human can reopen it "
        "(`loopwarden reopen`), or start a new loop with iteration_start"
    )


class LoopTools:
    """The tools' logic over one engine: each method takes a tool's arguments, returns its JSON."""

    def __init__(self, engine: LoopEngine) -> None:
        self.engine = engine
        # Notes from iteration_next, written into the agent context with the next output.

    # ----- finding loops -----------------------------------------------------------------

    def _task_loop(self, task_id: str) -> LoopSnapshot:
        loops = self.engine.list(task_id=task_id)
        if not loops:
            raise ToolError(
                f"taskId: no loop for task {task_id!r} in this database; "
                "start one with iteration_start"
            )
        live = [s for s in loops if not s.terminal]
        # engine.list leaves out the last decision; get() reads it.
        return self.engine.get((live or loops)[-1].id)

    def _resolve(
        self, task_id: str | None, iteration_id: str | None
    ) -> tuple[LoopSnapshot, int | None]:
        """The loop an iterationId or taskId names, and the iteration the id names if any."""
        if iteration_id is None:
            if task_id is None:
                raise ToolError("taskId: give taskId or iterationId")
            return self._task_loop(task_id), None
        loop_id, sep, number = iteration_id.rpartition(":")
        iteration: int | None = None
        if sep and number.isdigit():
            iteration = int(number)
        else:
            loop_id = iteration_id
        try:
            snapshot = self.engine.get(loop_id)
        except (LoopNotFoundError, ConfigError):
            raise ToolError(
                f"iterationId: no loop {loop_id!r} in this database (expected "
                "'<loopId>:<iteration>' as iteration_start returns it)"
            ) from None
        if task_id is not None and task_id != snapshot.task_id:
            raise ToolError(
                f"taskId: iterationId {iteration_id!r} belongs to task {snapshot.task_id!r}, "
                f"not {task_id!r}"
            )
        return snapshot, iteration

    def _evidence(self, snapshot: LoopSnapshot, iteration: int) -> Evidence | None:
        """The stored evidence of a decided iteration (its ``deciding`` checkpoint)."""
        # The decision's own checkpoint is the loop's latest, the deciding one just before it.
        for seq in (snapshot.seq - 1, snapshot.seq):
            try:
                cp = self.engine.checkpoint(snapshot.id, seq)
            except LookupError:
                continue
            if cp.state is State.DECIDING and cp.iteration == iteration and "evidence" in cp.data:
                return Evidence.from_dict(cp.data["evidence"])
        for record in reversed(self.engine.history(snapshot.id)):
            if record.iteration == iteration:
                return Evidence(iteration, snapshot.max_iterations, record.report, record.promises)
        return None

    def _history(self, loop_id: str) -> tuple[list[JSON], int]:
        records = self.engine.history(loop_id)
        return [_record_summary(r) for r in records[-_HISTORY_LIMIT:]], len(records)

    # ----- the iteration tools -----------------------------------------------------------

    def iteration_start(
        self,
        taskId: str,
        maxIterations: int | None = None,
        completionPromises: list[str] | None = None,
        validationRules: list[dict[str, Any]] | None = None,
        circuitBreakerThreshold: int | None = None,
        prompt: str | None = None,
        agentContext: dict[str, Any] | None = None,
    ) -> JSON:
        """Start a loop for a task; it is executing iteration 1 when this returns."""
        live = [s for s in self.engine.list(task_id=taskId) if not s.terminal]
        if live:
            current = live[-1]
            raise ToolError(
                f"taskId: task {taskId!r} already has a live loop {current.id} "
                f"({current.state.value}, iteration {current.iteration} of "
                f"{current.max_iterations}); continue it with iteration_validate or "
                "checkpoint_resume, or finish it first"
            )
        built = [
            _rule_from_json(raw, f"validationRules[{i}]")
            for i, raw in enumerate(validationRules or ())
        ]
        settings: dict[str, Any] = {"rules": built}
        if maxIterations is not None:
            settings["max_iterations"] = maxIterations
        if circuitBreakerThreshold is not None:
            settings["circuit_breaker_threshold"] = circuitBreakerThreshold
        if completionPromises is not None:
            settings["completion_promises"] = completionPromises
        config = LoopConfig(**settings)
        snapshot = self.engine.start(
            taskId,
            config,
            prompt=prompt or "",
            context=agentContext or {},
            metadata={"source": "mcp"},
        )
        return {
            "iterationId": _iteration_id(snapshot.id, snapshot.iteration),
            "taskId": snapshot.task_id,
            "loopId": snapshot.id,
            "iterationNumber": snapshot.iteration,
            "maxIterations": snapshot.max_iterations,
            "state": snapshot.state.value,
            "checkpointId": snapshot.seq,
        }

    def iteration_validate(
        self,
        agentOutput: str,
        taskId: str | None = None,
        iterationId: str | None = None,
        filesModified: list[str] | None = None,
        draftContent: str | None = None,
        draftType: str | None = None,
        agentContext: dict[str, Any] | None = None,
    ) -> JSON:
        """Hand in the agent's output for the current iteration: rules, hooks, guards decide."""
        snapshot, iteration = self._resolve(taskId, iterationId)
        if snapshot.terminal:
            raise ToolError(_stopped(snapshot))
        if snapshot.state is not State.EXECUTING:
            raise ToolError(
                f"iteration {snapshot.iteration}'s output is already in (loop {snapshot.id} is "
                f"{snapshot.state.value}, e.g. after a restart); call checkpoint_resume to "
                "finish deciding it"
            )
        if iteration is not None and iteration != snapshot.iteration:
            when = "was already decided" if iteration < snapshot.iteration else "has not begun"
            raise ToolError(
                f"iterationId: iteration {iteration} of loop {snapshot.id} {when}; the loop is "
                f"at iteration {snapshot.iteration} "
                f"(iterationId {_iteration_id(snapshot.id, snapshot.iteration)})"
            )
        update = dict(agentContext or {})
        decision = self.engine.submit(
            snapshot.id,
            agentOutput,
            files_modified=filesModified or (),
            draft=draftContent,
            draft_type=draftType,
            context=update,
        )
        after = self.engine.get(snapshot.id)
        evidence = self._evidence(after, decision.iteration)
        report = evidence.report if evidence else ValidationReport()
        promises = evidence.promises if evidence else ()
        result: JSON = {
            "taskId": after.task_id,
            "loopId": after.id,
            "iterationId": _iteration_id(after.id, decision.iteration),
            "iterationNumber": decision.iteration,
            "maxIterations": after.max_iterations,
            "validationPassed": report.passed,
            "completionSignal": decision.signal.value,
            "detectedPromise": promises[0].word if promises else None,
            "promises": [
                {"kind": p.kind.value, "word": p.word, "reason": p.reason} for p in promises
            ],
            "feedback": list(decision.feedback),
            "validationReport": _report_to_json(report),
            "score": decision.score,
            "reason": decision.reason,
            "state": decision.state.value,
            "terminalReason": decision.terminal_reason.value if decision.terminal_reason else None,
            "hookVerdict": (
                {
                    "action": evidence.hook.action.value,
                    "reason": evidence.hook.reason,
                    "source": evidence.hook.source,
                }
                if evidence and evidence.hook
                else None
            ),
            "message": self._decision_message(decision, after),
        }
        return result

    @staticmethod
    def _decision_message(decision: Decision, after: LoopSnapshot) -> str:
        n, most = decision.iteration, after.max_iterations
        if decision.signal is Signal.CONTINUE:
            return (
                f"Iteration {n} of {most} decided CONTINUE ({decision.reason}). The loop is at "
                f"iteration {n + 1}: call iteration_next for it, work on the feedback, then "
                "iteration_validate."
            )
        if decision.signal is Signal.COMPLETE:
            return f"Complete at iteration {n}: {decision.reason}. Call iteration_complete."
        return (
            f"The loop stopped at iteration {n}: {decision.signal.value} "
            f"({decision.terminal_reason.value if decision.terminal_reason else ''}): "
            f"{decision.reason}. Stop working on this task and report to a human."
        )

    def iteration_next(self, taskId: str, notes: str | None = None) -> JSON:
        """The iteration the loop moved to after a CONTINUE decision, with its checkpoint."""
        snapshot = self._task_loop(taskId)
        if snapshot.terminal:
            if snapshot.terminal_reason is TerminalReason.MAX_ITERATIONS:
                raise ToolError(
                    f"cannot continue past max iterations: loop {snapshot.id} used "
                    f"{snapshot.iteration} of {snapshot.max_iterations} iterations and was "
                    f"escalated ({snapshot.reason}). A human can reopen it with more iterations."
                )
            raise ToolError("cannot continue: " + _stopped(snapshot))
        if snapshot.state is not State.EXECUTING:
            raise ToolError(
                f"iteration {snapshot.iteration} of loop {snapshot.id} is {snapshot.state.value} "
                "(its output is in but not decided, e.g. after a restart); call checkpoint_resume"
            )
        last = snapshot.last_decision
        if last is None:
            raise ToolError(
                f"iteration {snapshot.iteration} has not been validated yet, so there is no next "
                "iteration; hand in its output with iteration_validate"
            )
        if notes is not None:
            kept = snapshot.context.get(_NOTES_KEY)
            kept = dict(kept) if isinstance(kept, Mapping) else {}
            kept[str(snapshot.iteration)] = notes
            snapshot = self.engine.update_context(snapshot.id, {_NOTES_KEY: kept})
        cp = self.engine.checkpoint(snapshot.id, snapshot.seq)
        message = (
            f"Iteration {snapshot.iteration} of {snapshot.max_iterations} is running after "
            f"iteration {last.iteration} decided {last.signal.value}: {last.reason}."
        )
        if last.feedback:
            message += (
                f" Work on the {len(last.feedback)} feedback item(s); the prompt includes them."
            )
        if notes is not None:
            message += (
                f" Notes stored in agentContext.{_NOTES_KEY}[{snapshot.iteration}] (durable)."
            )
        return {
            "taskId": snapshot.task_id,
            "loopId": snapshot.id,
            "iterationId": _iteration_id(snapshot.id, snapshot.iteration),
            "iterationNumber": snapshot.iteration,
            "maxIterations": snapshot.max_iterations,
            "checkpointId": cp.seq,
            "prompt": snapshot.current_prompt,
            "feedback": list(last.feedback),
            "message": message,
        }

    def iteration_complete(self, taskId: str, completionPromise: str | None = None) -> JSON:
        """The summary of a completed loop; an error unless the engine decided COMPLETE."""
        snapshot = self._task_loop(taskId)
        config = snapshot.config
        if completionPromise is not None:
            word = completionPromise.strip()
            lowered = word.lower()
            if lowered.startswith("<promise>") and lowered.endswith("</promise>"):
                word = word[len("<promise>") : -len("</promise>")].strip()
            if word.upper() not in config.completion_promises:
                raise ToolError(
                    f"completionPromise: {completionPromise!r} is not one of this loop's "
                    f"completion promises ({', '.join(config.completion_promises)})"
                )
        if snapshot.state is not State.COMPLETED:
            last = snapshot.last_decision
            if snapshot.terminal:
                raise ToolError("cannot complete: " + _stopped(snapshot))
            if last is None:
                raise ToolError(
                    f"cannot complete: iteration {snapshot.iteration} has not been validated; a "
                    "loop completes only when iteration_validate answers COMPLETE"
                )
            raise ToolError(
                f"cannot complete: the last decision (iteration {last.iteration}) was "
                f"{last.signal.value}, not COMPLETE: {last.reason}. The loop is at iteration "
                f"{snapshot.iteration} of {snapshot.max_iterations}: call iteration_next for "
                "its prompt and feedback, then iteration_validate"
            )
        history, total = self._history(snapshot.id)
        last = snapshot.last_decision
        final = last.score if last else None
        completed_at = history[-1]["decidedAt"] if history else _iso(snapshot.updated_at)
        return {
            "taskId": snapshot.task_id,
            "loopId": snapshot.id,
            "totalIterations": total,
            "finalValidationScore": final,
            "iterationHistory": history,
            "completedAt": completed_at,
            "terminalReason": snapshot.terminal_reason.value if snapshot.terminal_reason else None,
            "message": f"Task {snapshot.task_id!r} completed after {total} iteration(s): "
            f"{snapshot.reason}",
        }

    def iteration_status(self, taskId: str) -> JSON:
        """Where the task's current loop stands."""
        snapshot = self._task_loop(taskId)
        history, total = self._history(snapshot.id)
        last = snapshot.last_decision
        return {
            "taskId": snapshot.task_id,
            "loopId": snapshot.id,
            "iterationId": _iteration_id(snapshot.id, snapshot.iteration),
            "state": snapshot.state.value,
            "iterationNumber": snapshot.iteration,
            "maxIterations": snapshot.max_iterations,
            "lastScore": snapshot.last_score,
            "lastSignal": last.signal.value if last else None,
            "consecutiveFailures": snapshot.consecutive_failures,
            "terminalReason": snapshot.terminal_reason.value if snapshot.terminal_reason else None,
            "reason": snapshot.reason or (last.reason if last else ""),
            "checkpointId": snapshot.seq,
            "iterationsDecided": total,
            "historySummary": history,
        }

    def checkpoint_resume(self, taskId: str, checkpointId: int | None = None) -> JSON:
        """Resume the task's loop from its latest checkpoint, finishing any pending decision."""
        snapshot = self._task_loop(taskId)
        note = ""
        if checkpointId is not None:
            if checkpointId > snapshot.seq or checkpointId < 1:
                raise ToolError(
                    f"checkpointId: loop {snapshot.id} has checkpoints 1..{snapshot.seq}, "
                    f"got {checkpointId}"
                )
            try:
                named = self.engine.checkpoint(snapshot.id, checkpointId)
            except LookupError:
                raise ToolError(
                    f"checkpointId: loop {snapshot.id} no longer has checkpoint {checkpointId} "
                    "(pruned)"
                ) from None
            if named.seq != snapshot.seq:
                # Rewinding would hand an agent back iterations its guards already spent.
                note = (
                    f"Checkpoint {named.seq} ({named.state.value}, iteration {named.iteration}) "
                    f"is not the latest; loops never rewind over MCP, so the loop resumed from "
                    f"its latest checkpoint {snapshot.seq}. "
                )
        pending = snapshot.state in (State.INITIALIZED, State.VALIDATING, State.DECIDING)
        before = snapshot.state
        if not snapshot.terminal:
            snapshot = self.engine.resume(snapshot.id)
        history, total = self._history(snapshot.id)
        last = snapshot.last_decision
        result: JSON = {
            "taskId": snapshot.task_id,
            "loopId": snapshot.id,
            "iterationId": _iteration_id(snapshot.id, snapshot.iteration),
            "iterationNumber": snapshot.iteration,
            "state": snapshot.state.value,
            "checkpointId": snapshot.seq,
            "iterationConfig": _config_to_json(snapshot.config),
            "iterationHistory": history,
            "iterationsDecided": total,
            "agentContext": snapshot.context,
            "prompt": snapshot.current_prompt if snapshot.state is State.EXECUTING else None,
            "pendingDecision": (
                {
                    "iterationNumber": last.iteration,
                    "completionSignal": last.signal.value,
                    "reason": last.reason,
                    "feedback": list(last.feedback),
                }
                if pending and before is not State.INITIALIZED and last
                else None
            ),
        }
        result["resumeInstructions"] = note + self._instructions(snapshot, before, pending)
        return result

    @staticmethod
    def _instructions(snapshot: LoopSnapshot, before: State, pending: bool) -> str:
        last = snapshot.last_decision
        done = ""
        if pending and before is not State.INITIALIZED and last is not None:
            done = (
                f"The output of iteration {last.iteration} was already in when the loop stopped "
                f"({before.value}); its decision is now applied: {last.signal.value} "
                f"({last.reason}). "
            )
        if snapshot.state is State.EXECUTING:
            return done + (
                f"Continue iteration {snapshot.iteration} of {snapshot.max_iterations}: work on "
                f"the prompt below, then call iteration_validate with iterationId "
                f"{_iteration_id(snapshot.id, snapshot.iteration)}.\n\n{snapshot.current_prompt}"
            )
        return done + _stopped(snapshot)

    # ----- the stop-hook tools -----------------------------------------------------------

    def hook_register(
        self,
        taskId: str,
        hookType: Literal["default", "validation", "promise"],
        metadata: dict[str, Any] | None = None,
    ) -> JSON:
        """Register a preset stop hook for a task; it is persisted and survives restarts."""
        if hookType not in ("default", "validation", "promise"):
            raise ToolError(f"hookType: must be default, validation or promise, got {hookType!r}")
        hook_id = self.engine.hooks.register(taskId, hookType, metadata=metadata or {})
        info = self.engine.hooks.get(hook_id)
        return {
            "hookId": info.id,
            "taskId": info.task_id,
            "hookType": info.name,
            "enabled": info.enabled,
            "metadata": info.metadata,
            "order": info.order,
        }

    def hook_evaluate(
        self,
        agentOutput: str,
        iterationId: str | None = None,
        taskId: str | None = None,
        filesModified: list[str] | None = None,
        draftContent: str | None = None,
        draftType: str | None = None,
    ) -> JSON:
        """Evaluate the task's stop hooks on an output, changing nothing (a dry run)."""
        snapshot, _iteration = self._resolve(taskId, iterationId)
        evaluation = self.engine.evaluate_hooks(
            snapshot.id,
            agentOutput,
            files_modified=filesModified or (),
            draft=draftContent,
            draft_type=draftType,
        )
        result = evaluation.result
        return {
            "hookId": evaluation.hook_id,
            "taskId": snapshot.task_id,
            "loopId": snapshot.id,
            "iteration": max(snapshot.iteration, 1),
            "action": result.action.value,
            "reason": result.reason,
            "nextPrompt": result.next_prompt,
            "checkpointCreated": False,
            "metadata": dict(result.metadata),
            "evaluations": [r.to_dict() for r in evaluation.records],
        }

    def hook_list(self, taskId: str) -> JSON:
        """A task's registered hooks, in evaluation order."""
        hooks = self.engine.hooks.list(taskId)
        return {
            "taskId": taskId,
            "hookCount": len(hooks),
            "hooks": [
                {
                    "hookId": h.id,
                    "hookType": h.name,
                    "kind": h.kind,
                    "enabled": h.enabled,
                    "metadata": h.metadata,
                    "order": h.order,
                }
                for h in hooks
            ],
        }

    def hook_clear(self, taskId: str) -> JSON:
        """Remove every hook of a task."""
        return {"taskId": taskId, "hooksCleared": self.engine.hooks.clear(taskId)}


# ----- the MCP surface -----------------------------------------------------------------------

_TaskId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        strict=True,
        description="The task's id; it names the task's current loop.",
    ),
]
_IterationId = Annotated[
    str | None,
    Field(
        min_length=1,
        strict=True,
        description="'<loopId>:<iteration>' as iteration_start / iteration_validate return it, "
        "or a bare loop id.",
    ),
]
_Output = Annotated[str, Field(strict=True, description="The agent's output for the iteration.")]
_Files = Annotated[list[str] | None, Field(description="Paths the agent modified.")]
_Draft = Annotated[
    str | None, Field(strict=True, description="A draft the content_pattern rules may check.")
]
_DraftType = Annotated[str | None, Field(strict=True, description="The draft's type, e.g. 'md'.")]
_Context = Annotated[
    dict[str, Any] | None,
    Field(description="A JSON object merged into the loop's agent context."),
]
_StrictInt = Annotated[int | None, Field(strict=True)]
_RULES_HELP = (
    "Validation rules, each one of: "
    '{"type": "command", "name": N, "config": {"command": "pytest -q" or ["pytest", "-q"], '
    '"timeout"?: seconds}} (passes when the command exits 0; no shell); '
    '{"type": "content_pattern", "name": N, "pattern": REGEX, '
    '"target"?: "agent_output" | "draft", "mustMatch"?: true}; '
    '{"type": "coverage", "name": N, "config": {"minCoverage": 80, '
    '"report"?: "coverage.json"}} (coverage.py JSON or Cobertura XML).'
)


def build_server(engine: LoopEngine) -> MCPServer[Any]:
    """The MCP server with every loopwarden tool, over ``engine``."""
    tools = LoopTools(engine)
    server: MCPServer[Any] = MCPServer(
        "loopwarden",
        version=__version__,
        instructions=(
            "Run your own iteration loop durably: iteration_start once per task, then for each "
            "iteration do the work and call iteration_validate with your output. On CONTINUE "
            "call iteration_next and work on the feedback; on COMPLETE call iteration_complete; "
            "on BLOCKED or ESCALATE stop and report. After a restart call checkpoint_resume. "
            "Promise tags in your output: <promise>COMPLETE</promise>, "
            "<promise>BLOCKED</promise>, <promise>ESCALATE</promise>."
        ),
        log_level="WARNING",
    )

    @_tool_errors
    def iteration_start(
        taskId: _TaskId,
        maxIterations: Annotated[
            _StrictInt, Field(description="Iteration budget (default 15).")
        ] = None,
        completionPromises: Annotated[
            list[str] | None,
            Field(description="Promise words that claim completion (default ['COMPLETE'])."),
        ] = None,
        validationRules: Annotated[
            list[dict[str, Any]] | None, Field(description=_RULES_HELP)
        ] = None,
        circuitBreakerThreshold: Annotated[
            _StrictInt,
            Field(description="Failed iterations in a row that escalate the loop (default 3)."),
        ] = None,
        prompt: Annotated[str | None, Field(strict=True, description="The task's prompt.")] = None,
        agentContext: _Context = None,
    ) -> dict[str, Any]:
        """Start a durable loop for a task; it is executing iteration 1 when this returns.

        Returns {iterationId, taskId, loopId, iterationNumber, maxIterations, state,
        checkpointId}. A task with a live loop is refused.
        """
        return tools.iteration_start(
            taskId,
            maxIterations,
            completionPromises,
            validationRules,
            circuitBreakerThreshold,
            prompt,
            agentContext,
        )

    @_tool_errors
    def iteration_validate(
        agentOutput: _Output,
        taskId: Annotated[
            str | None, Field(strict=True, description="The task (or give iterationId).")
        ] = None,
        iterationId: _IterationId = None,
        filesModified: _Files = None,
        draftContent: _Draft = None,
        draftType: _DraftType = None,
        agentContext: _Context = None,
    ) -> dict[str, Any]:
        """Hand in the output of the current iteration: rules run, stop hooks and guards decide.

        Returns {taskId, iterationNumber, validationPassed, completionSignal (CONTINUE |
        COMPLETE | BLOCKED | ESCALATE), detectedPromise, feedback[], validationReport, score,
        reason, state, message}. The loop moves at once: to the next iteration on CONTINUE.
        """
        return tools.iteration_validate(
            agentOutput,
            taskId,
            iterationId,
            filesModified,
            draftContent,
            draftType,
            agentContext,
        )

    @_tool_errors
    def iteration_next(
        taskId: _TaskId,
        notes: Annotated[
            str | None,
            Field(
                strict=True,
                description="Your notes for this iteration; stored in the agent context "
                "with its output.",
            ),
        ] = None,
    ) -> dict[str, Any]:
        """The iteration the loop is in after a CONTINUE decision, with its prompt and feedback.

        Returns {taskId, iterationNumber, maxIterations, checkpointId, prompt, feedback,
        message}. An error when the loop is finished or the current iteration is undecided.
        """
        return tools.iteration_next(taskId, notes)

    @_tool_errors
    def iteration_complete(
        taskId: _TaskId,
        completionPromise: Annotated[
            str | None,
            Field(strict=True, description="The completion promise you made, e.g. COMPLETE."),
        ] = None,
    ) -> dict[str, Any]:
        """Summarise a completed loop; an error unless the last decision was COMPLETE.

        Returns {taskId, totalIterations, finalValidationScore, iterationHistory, completedAt,
        message}.
        """
        return tools.iteration_complete(taskId, completionPromise)

    @_tool_errors
    def iteration_status(taskId: _TaskId) -> dict[str, Any]:
        """The task's current loop: state, iteration, max, last score, failures, history."""
        return tools.iteration_status(taskId)

    @_tool_errors
    def checkpoint_resume(
        taskId: _TaskId,
        checkpointId: Annotated[
            int | None,
            Field(strict=True, description="A checkpoint seq (iteration_next's checkpointId)."),
        ] = None,
    ) -> dict[str, Any]:
        """Resume the task's loop after a restart, finishing a decision left pending.

        Returns {iterationNumber, iterationConfig, iterationHistory, agentContext,
        resumeInstructions, prompt, state, checkpointId}.
        """
        return tools.checkpoint_resume(taskId, checkpointId)

    @_tool_errors
    def hook_register(
        taskId: _TaskId,
        hookType: Annotated[
            Literal["default", "validation", "promise"],
            Field(
                description="default: promises, then validation; validation: rules only; "
                "promise: promises only."
            ),
        ],
        metadata: Annotated[
            dict[str, Any] | None, Field(description="Any JSON kept with the hook.")
        ] = None,
    ) -> dict[str, Any]:
        """Register a stop hook for a task (persisted: in force after a server restart)."""
        return tools.hook_register(taskId, hookType, metadata)

    @_tool_errors
    def hook_evaluate(
        agentOutput: _Output,
        iterationId: _IterationId = None,
        taskId: Annotated[
            str | None, Field(strict=True, description="The task (or give iterationId).")
        ] = None,
        filesModified: _Files = None,
        draftContent: _Draft = None,
        draftType: _DraftType = None,
    ) -> dict[str, Any]:
        """Evaluate the task's stop hooks on an output without changing the loop (dry run)."""
        return tools.hook_evaluate(
            agentOutput, iterationId, taskId, filesModified, draftContent, draftType
        )

    @_tool_errors
    def hook_list(taskId: _TaskId) -> dict[str, Any]:
        """A task's stop hooks in evaluation order."""
        return tools.hook_list(taskId)

    @_tool_errors
    def hook_clear(taskId: _TaskId) -> dict[str, Any]:
        """Remove every stop hook of a task; returns how many were removed."""
        return tools.hook_clear(taskId)

    for fn in (
        iteration_start,
        iteration_validate,
        iteration_next,
        iteration_complete,
        iteration_status,
        checkpoint_resume,
        hook_register,
        hook_evaluate,
        hook_list,
        hook_clear,
    ):
        server.add_tool(fn, name=fn.__name__)
    return server


def serve(db_url: str | None = None, *, log_level: str = "info") -> None:
    """Serve the tools on stdio over the database at ``db_url`` until the client disconnects.

    ``db_url`` is a SQLAlchemy URL or a SQLite file path; None means
    ``LOOPWARDEN_DATABASE_URL``, else ``.loopwarden/loopwarden.db`` in the working directory.
    """
    # Before anything can log: stdout belongs to the protocol.
    configure_logging(level=log_level, stream=sys.stderr)
    engine = LoopEngine(db_url)
    get_logger().info("mcp_server_started", database=engine.url, pid=os.getpid())
    try:
        build_server(engine).run("stdio")
    finally:
        engine.close()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m loopwarden.integrations.mcp_server [--db URL] [--log-level LEVEL]``."""
    parser = argparse.ArgumentParser(
        prog="loopwarden mcp", description="Serve loopwarden's loop tools over MCP on stdio."
    )
    parser.add_argument(
        "--db",
        default=None,
        help="database URL or SQLite file (default: $LOOPWARDEN_DATABASE_URL, else "
        ".loopwarden/loopwarden.db in the working directory)",
    )
    parser.add_argument("--log-level", default="info", help="stderr log level (default: info)")
    args = parser.parse_args(argv)
    serve(args.db, log_level=args.log_level)


if __name__ == "__main__":
    main()
