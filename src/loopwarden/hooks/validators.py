"""Completion validators: ``validate_completion(stop_reason, tool_count, retry_count)``.

A validator answers ``(complete, reason)``; the answer renders as ``[complete] reason`` or
``[incomplete] reason``. Validators combine with AND (``a & b`` or :func:`all_of`): the first
one that says incomplete is the answer. They are consulted when a loop is about to complete;
an incomplete answer vetoes the stop (the loop continues with the reason as feedback), and
after ``max_stop_retries`` vetoes in a row the engine allows the stop and records it as forced.

Two validators ship: :func:`todos_done` (every todo in the agent context is done) and
:func:`command_succeeds` (a command exits 0). Both store as JSON specs; a custom validator is
stored by the name given to :func:`define_validator`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loopwarden import process
from loopwarden.errors import ConfigError, UnresolvedReferenceError
from loopwarden.model import JSON

__all__ = [
    "CompletionValidator",
    "ValidationOutcome",
    "all_of",
    "command_succeeds",
    "define_validator",
    "resolve_validator",
    "todos_done",
    "validator",
]


@dataclass(frozen=True, slots=True)
class ValidationOutcome:
    """A validator's answer."""

    complete: bool
    reason: str

    def __str__(self) -> str:
        return f"[{'complete' if self.complete else 'incomplete'}] {self.reason}"

    def __iter__(self) -> Any:
        return iter((self.complete, self.reason))


@dataclass(frozen=True, slots=True)
class ValidatorInput:
    """What a validator is given, plus the loop's agent context and working directory."""

    stop_reason: str
    tool_count: int
    retry_count: int
    context: Mapping[str, Any]
    workdir: str | None


class CompletionValidator:
    """A validator: ``check(input) -> ValidationOutcome``; ``&`` combines with AND."""

    name: str = "validator"

    def check(self, given: ValidatorInput) -> ValidationOutcome:
        raise NotImplementedError

    def spec(self) -> JSON:
        """The JSON stored with the task: a built-in's spec, or the registered name."""
        return {"name": self.name}

    def validate_completion(
        self, stop_reason: str, tool_count: int, retry_count: int
    ) -> ValidationOutcome:
        """The classic signature, without agent context."""
        return self.check(ValidatorInput(stop_reason, tool_count, retry_count, {}, None))

    def __and__(self, other: CompletionValidator) -> CompletionValidator:
        return all_of(self, other)


class _FunctionValidator(CompletionValidator):
    def __init__(self, fn: Callable[[str, int, int], Any], name: str) -> None:
        self.fn = fn
        self.name = name

    def check(self, given: ValidatorInput) -> ValidationOutcome:
        answer = self.fn(given.stop_reason, given.tool_count, given.retry_count)
        if isinstance(answer, ValidationOutcome):
            return answer
        complete, reason = answer
        return ValidationOutcome(bool(complete), str(reason))


class _AllOf(CompletionValidator):
    def __init__(self, members: Sequence[CompletionValidator]) -> None:
        self.members = tuple(members)
        self.name = " & ".join(m.name for m in self.members)

    def check(self, given: ValidatorInput) -> ValidationOutcome:
        reasons = []
        for member in self.members:
            outcome = member.check(given)
            if not outcome.complete:
                return outcome
            reasons.append(outcome.reason)
        return ValidationOutcome(True, "; ".join(r for r in reasons if r))

    def spec(self) -> JSON:
        return {"all_of": [m.spec() for m in self.members]}


def all_of(*validators: CompletionValidator) -> CompletionValidator:
    """AND: complete only when every validator says so; the first incomplete one answers."""
    return _AllOf(validators)


def validator(fn: Callable[[str, int, int], Any], name: str | None = None) -> CompletionValidator:
    """A validator from ``fn(stop_reason, tool_count, retry_count) -> (complete, reason)``."""
    return _FunctionValidator(fn, name or str(getattr(fn, "__qualname__", "validator")))


class _TodosDone(CompletionValidator):
    def __init__(self, key: str) -> None:
        self.key = key
        self.name = f"todos_done({key})"

    def check(self, given: ValidatorInput) -> ValidationOutcome:
        todos = given.context.get(self.key)
        if not todos:
            return ValidationOutcome(True, f"no todos in the agent context ({self.key!r})")
        if not isinstance(todos, list):
            return ValidationOutcome(False, f"agent context {self.key!r} must be a list of todos")
        open_items = []
        for item in todos:
            if isinstance(item, Mapping):
                status = str(item.get("status", "")).lower()
                done = status in ("done", "completed", "complete") or item.get("done") is True
                title = str(item.get("content") or item.get("title") or item.get("id") or item)
            else:
                done, title = False, str(item)
            if not done:
                open_items.append(title)
        if open_items:
            shown = ", ".join(open_items[:5]) + (" …" if len(open_items) > 5 else "")
            return ValidationOutcome(False, f"{len(open_items)} todo(s) not done: {shown}")
        return ValidationOutcome(True, f"all {len(todos)} todos are done")

    def spec(self) -> JSON:
        return {"builtin": "todos_done", "key": self.key}


def todos_done(key: str = "todos") -> CompletionValidator:
    """Complete when every todo in the agent context's ``key`` list is done.

    A todo is a dict with ``status`` done/completed (or ``done: true``); any other entry is open.
    """
    return _TodosDone(key)


class _CommandSucceeds(CompletionValidator):
    def __init__(self, argv: tuple[str, ...], timeout: float) -> None:
        self.argv = argv
        self.timeout = timeout
        self.name = f"command_succeeds({' '.join(argv)})"

    def check(self, given: ValidatorInput) -> ValidationOutcome:
        result = process.run(self.argv, timeout=self.timeout, cwd=given.workdir, keep="tail")
        if result.ok:
            return ValidationOutcome(True, f"{' '.join(self.argv)} exited 0")
        tail = (result.stdout + result.stderr).strip()[-500:]
        return ValidationOutcome(False, f"{result.describe()}" + (f": {tail}" if tail else ""))

    def spec(self) -> JSON:
        return {"builtin": "command_succeeds", "argv": list(self.argv), "timeout": self.timeout}


def command_succeeds(argv: Sequence[str] | str, *, timeout: float = 300.0) -> CompletionValidator:
    """Complete when the command exits 0 (run in the loop's working directory)."""
    args = tuple(process.split_command(argv)) if isinstance(argv, str) else tuple(argv)
    if not args:
        raise ConfigError("command_succeeds.argv", "must not be empty")
    if timeout <= 0:
        raise ConfigError("command_succeeds.timeout", f"must be > 0, got {timeout}")
    return _CommandSucceeds(args, float(timeout))


_REGISTRY: dict[str, CompletionValidator] = {}


def define_validator(
    name: str, fn: CompletionValidator | Callable[[str, int, int], Any]
) -> CompletionValidator:
    """Register a validator under a name so a resumed loop (in this process) finds it."""
    if not isinstance(name, str) or not name:
        raise ConfigError("validator name", f"must be a non-empty string, got {name!r}")
    v = fn if isinstance(fn, CompletionValidator) else validator(fn, name)
    named = _Named(name, v)
    _REGISTRY[name] = named
    return named


class _Named(CompletionValidator):
    def __init__(self, name: str, inner: CompletionValidator) -> None:
        self.name = name
        self.inner = inner

    def check(self, given: ValidatorInput) -> ValidationOutcome:
        return self.inner.check(given)


def resolve_validator(spec: Mapping[str, Any]) -> CompletionValidator:
    """Rebuild a validator from its stored spec; an unknown name is an error naming it."""
    if "all_of" in spec:
        return _AllOf([resolve_validator(s) for s in spec["all_of"]])
    builtin = spec.get("builtin")
    if builtin == "todos_done":
        return todos_done(str(spec.get("key", "todos")))
    if builtin == "command_succeeds":
        return command_succeeds(list(spec["argv"]), timeout=float(spec.get("timeout", 300.0)))
    name = str(spec.get("name"))
    found = _REGISTRY.get(name)
    if found is None:
        raise UnresolvedReferenceError(
            f"completion validator {name!r} is not registered in this process; define it with "
            f"loopwarden.hooks.define_validator({name!r}, fn) before resuming"
        )
    return found
