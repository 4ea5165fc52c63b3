"""Validation rules: small frozen objects made by the factory functions below.

Each rule answers passed / failed / errored for one submission, with a message and the time it
took. *Errored* means the rule could not be evaluated (command not found, timeout, unreadable
report, a predicate that raised), which the score counts against the iteration separately
from failing. Rules are stored with the loop as JSON; a predicate is stored by its name and
found again through the registry that :func:`predicate` fills.
"""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from loopwarden import process
from loopwarden.errors import ConfigError, UnresolvedReferenceError
from loopwarden.model import JSON, RuleResult, RuleStatus, ValidationReport

__all__ = [
    "CommandRule",
    "CoverageRule",
    "PatternRule",
    "PredicateRule",
    "Rule",
    "Submission",
    "command",
    "coverage",
    "evaluate_all",
    "pattern",
    "predicate",
    "registered_predicates",
    "rule_from_dict",
]

_MESSAGE_LIMIT = 1500
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


@dataclass(frozen=True, slots=True)
class Submission:
    """What a rule sees: the agent's output for one iteration and where it ran."""

    output: str
    draft: str | None = None
    draft_type: str | None = None
    files_modified: tuple[str, ...] = ()
    context: Mapping[str, Any] = field(default_factory=dict)
    iteration: int = 1
    workdir: str | None = None
    loop_id: str = ""
    task_id: str = ""


def _tail(text: str, limit: int = _MESSAGE_LIMIT) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def _bound(message: str, limit: int = _MESSAGE_LIMIT) -> str:
    """Bound a message, keeping its first line (the verdict) and the tail (the evidence)."""
    message = message.strip()
    if len(message) <= limit:
        return message
    first, _, rest = message.partition("\n")
    first = first[: limit // 2]
    return first + "\n" + _tail(rest, limit - len(first) - 2)


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            "rule.name",
            f"must be 1-64 letters, digits or _.:- characters, got {name!r}",
        )
    return name


class Rule(ABC):
    """A validation rule. Subclasses implement ``check``; ``evaluate`` times it."""

    kind: ClassVar[str]
    name: str

    @abstractmethod
    def check(self, submission: Submission) -> tuple[RuleStatus, str]:
        """The status and a message for one submission."""

    @abstractmethod
    def to_dict(self) -> JSON:
        """The JSON form stored with the loop."""

    @property
    def resolvable(self) -> bool:
        """False when the rule refers to something not registered in this process."""
        return True

    def evaluate(self, submission: Submission) -> RuleResult:
        """Run the rule; an unexpected exception becomes an errored result, never a crash."""
        started = time.perf_counter()
        try:
            status, message = self.check(submission)
        except Exception as exc:
            status, message = RuleStatus.ERRORED, f"{type(exc).__name__}: {exc}"
        return RuleResult(self.name, status, _bound(message), time.perf_counter() - started)


@dataclass(frozen=True, slots=True)
class CommandRule(Rule):
    """Passes when the command exits 0; errors when it cannot run or times out."""

    kind: ClassVar[str] = "command"
    name: str
    argv: tuple[str, ...] | str
    timeout: float = 300.0
    shell: bool = False
    cwd: str | None = None
    env: Mapping[str, str] | None = None

    def check(self, submission: Submission) -> tuple[RuleStatus, str]:
        cwd = self.cwd
        if cwd is not None and submission.workdir and not Path(cwd).is_absolute():
            cwd = str(Path(submission.workdir) / cwd)
        result = process.run(
            self.argv,
            timeout=self.timeout,
            cwd=cwd or submission.workdir,
            shell=self.shell,
            extra_env=dict(self.env or {}),
            keep="tail",
            max_output=64_000,
        )
        if result.error:
            return RuleStatus.ERRORED, result.error
        if result.timed_out:
            return RuleStatus.ERRORED, f"timed out after {self.timeout:g}s; output so far:\n" + (
                _tail(result.stdout + result.stderr, 600)
            )
        output = _tail(result.stdout + ("\n" + result.stderr if result.stderr else ""))
        if result.returncode == 0:
            return RuleStatus.PASSED, "exit status 0"
        return RuleStatus.FAILED, f"exit status {result.returncode}\n{output}".strip()

    def to_dict(self) -> JSON:
        return {
            "type": self.kind,
            "name": self.name,
            "argv": self.argv if isinstance(self.argv, str) else list(self.argv),
            "timeout": self.timeout,
            "shell": self.shell,
            "cwd": self.cwd,
            "env": dict(self.env) if self.env else None,
        }

    def __repr__(self) -> str:
        return f"<command rule {self.name!r}: {self.argv!r} timeout={self.timeout:g}s>"


@dataclass(frozen=True, slots=True)
class PatternRule(Rule):
    """A regular expression that must (or must not) match the output or the draft."""

    kind: ClassVar[str] = "pattern"
    name: str
    regex: str
    must_match: bool = True
    target: Literal["output", "draft"] = "output"
    ignore_case: bool = False
    compiled: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        flags = re.MULTILINE | (re.IGNORECASE if self.ignore_case else 0)
        try:
            object.__setattr__(self, "compiled", re.compile(self.regex, flags))
        except (re.error, TypeError) as exc:
            raise ConfigError(
                f"rules[{self.name}].pattern", f"invalid regular expression {self.regex!r}: {exc}"
            ) from None

    def check(self, submission: Submission) -> tuple[RuleStatus, str]:
        text = submission.output if self.target == "output" else submission.draft
        if text is None:
            if self.must_match:
                return RuleStatus.FAILED, f"no {self.target} was submitted to match {self.regex!r}"
            return RuleStatus.PASSED, f"no {self.target} submitted"
        match = self.compiled.search(text)
        if self.must_match:
            if match:
                return RuleStatus.PASSED, f"{self.regex!r} found in the {self.target}"
            return (
                RuleStatus.FAILED,
                f"{self.regex!r} must appear in the {self.target} but does not",
            )
        if match is None:
            return RuleStatus.PASSED, f"{self.regex!r} absent from the {self.target}"
        line_no = text.count("\n", 0, match.start()) + 1
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        line = text[start : end if end >= 0 else len(text)].strip()
        return (
            RuleStatus.FAILED,
            f"{self.regex!r} must not appear in the {self.target}; found at line {line_no}: "
            f"{line[:200]}",
        )

    def to_dict(self) -> JSON:
        return {
            "type": self.kind,
            "name": self.name,
            "pattern": self.regex,
            "must_match": self.must_match,
            "target": self.target,
            "ignore_case": self.ignore_case,
        }

    def __repr__(self) -> str:
        verb = "must match" if self.must_match else "must not match"
        return f"<pattern rule {self.name!r}: {self.target} {verb} {self.regex!r}>"


def _read_coverage(path: Path) -> float:
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("<"):
        root = ET.fromstring(text)
        if root.tag != "coverage" or "line-rate" not in root.attrib:
            raise ValueError("not a Cobertura report (no <coverage line-rate=...> root)")
        return float(root.attrib["line-rate"]) * 100
    data = json.loads(text)
    try:
        return float(data["totals"]["percent_covered"])
    except (KeyError, TypeError):
        raise ValueError("not a coverage.py JSON report (no totals.percent_covered)") from None


@dataclass(frozen=True, slots=True)
class CoverageRule(Rule):
    """A coverage.py JSON or Cobertura XML report's total against a minimum percentage."""

    kind: ClassVar[str] = "coverage"
    name: str
    report: str
    minimum: float

    def check(self, submission: Submission) -> tuple[RuleStatus, str]:
        path = Path(self.report)
        if not path.is_absolute() and submission.workdir:
            path = Path(submission.workdir) / path
        if not path.is_file():
            return RuleStatus.ERRORED, f"coverage report {str(path)!r} not found"
        try:
            total = _read_coverage(path)
        except (OSError, ValueError, ET.ParseError) as exc:
            return RuleStatus.ERRORED, f"cannot read coverage report {str(path)!r}: {exc}"
        if total >= self.minimum:
            return RuleStatus.PASSED, f"coverage {total:.1f}% >= {self.minimum:g}%"
        return RuleStatus.FAILED, f"coverage {total:.1f}% is below the minimum {self.minimum:g}%"

    def to_dict(self) -> JSON:
        return {
            "type": self.kind,
            "name": self.name,
            "report": self.report,
            "minimum": self.minimum,
        }

    def __repr__(self) -> str:
        return f"<coverage rule {self.name!r}: {self.report} >= {self.minimum:g}%>"


Predicate = Callable[[Submission], "bool | tuple[bool, str]"]
_PREDICATES: dict[str, Predicate] = {}


@dataclass(frozen=True, slots=True)
class PredicateRule(Rule):
    """Any Python callable of the submission, stored by name and resolved from the registry."""

    kind: ClassVar[str] = "predicate"
    name: str
    fn: Predicate | None = field(default=None, compare=False)

    @property
    def resolvable(self) -> bool:
        return self.function() is not None

    def function(self) -> Predicate | None:
        return self.fn or _PREDICATES.get(self.name)

    def check(self, submission: Submission) -> tuple[RuleStatus, str]:
        fn = self.function()
        if fn is None:
            raise UnresolvedReferenceError(_unresolved_message(self.name))
        answer = fn(submission)
        if isinstance(answer, tuple):
            ok, message = bool(answer[0]), str(answer[1])
        else:
            ok, message = bool(answer), ""
        if ok:
            return RuleStatus.PASSED, message or "predicate held"
        return RuleStatus.FAILED, message or f"predicate {self.name!r} did not hold"

    def to_dict(self) -> JSON:
        return {"type": self.kind, "name": self.name}

    def __repr__(self) -> str:
        return f"<predicate rule {self.name!r}>"


def _unresolved_message(name: str) -> str:
    return (
        f"predicate rule {name!r} is not registered in this process; call "
        f"loopwarden.rules.predicate({name!r}, fn) before resuming this loop"
    )


def command(
    name: str,
    argv: Sequence[str] | str,
    *,
    timeout: float = 300.0,
    shell: bool = False,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
) -> CommandRule:
    """A rule that passes when ``argv`` exits 0. A string needs ``shell=True`` or is split."""
    _check_name(name)
    if isinstance(argv, str):
        args: tuple[str, ...] | str = argv if shell else tuple(process.split_command(argv))
    else:
        args = tuple(str(a) for a in argv)
    if not args:
        raise ConfigError(f"rules[{name}].command", "must not be empty")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigError(f"rules[{name}].timeout", f"must be a number > 0, got {timeout!r}")
    return CommandRule(name, args, float(timeout), shell, cwd, dict(env) if env else None)


def pattern(
    name: str,
    regex: str,
    *,
    must_match: bool = True,
    target: Literal["output", "draft"] = "output",
    ignore_case: bool = False,
) -> PatternRule:
    """A rule on a regular expression; an invalid one is a ConfigError now, not at run time."""
    _check_name(name)
    if target not in ("output", "draft"):
        raise ConfigError(f"rules[{name}].target", f"must be 'output' or 'draft', got {target!r}")
    return PatternRule(name, regex, bool(must_match), target, bool(ignore_case))


def coverage(name: str, report: str, *, minimum: float) -> CoverageRule:
    """A rule on a coverage report (coverage.py JSON or Cobertura XML): total >= minimum."""
    _check_name(name)
    if isinstance(minimum, bool) or not isinstance(minimum, int | float):
        raise ConfigError(f"rules[{name}].minimum", f"must be a number, got {minimum!r}")
    if not 0 <= minimum <= 100:
        raise ConfigError(f"rules[{name}].minimum", f"must be within 0..100, got {minimum}")
    if not isinstance(report, str) or not report:
        raise ConfigError(f"rules[{name}].report", "must be the path of a coverage report")
    return CoverageRule(name, report, float(minimum))


def predicate(name: str, fn: Predicate) -> PredicateRule:
    """A rule from a callable ``fn(submission) -> bool | (bool, message)``.

    The callable is registered under ``name`` so a loop resumed in this process finds it; a
    loop resumed in a new process needs the same ``predicate(name, fn)`` call first.
    """
    _check_name(name)
    if not callable(fn):
        raise ConfigError(f"rules[{name}].fn", f"must be callable, got {fn!r}")
    _PREDICATES[name] = fn
    return PredicateRule(name, fn)


def registered_predicates() -> dict[str, Predicate]:
    """A copy of the predicate registry."""
    return dict(_PREDICATES)


def rule_from_dict(data: object, where: str = "rule") -> Rule:
    """Rebuild a rule from its JSON form; a wrong shape is a ConfigError naming the field."""
    if not isinstance(data, Mapping):
        raise ConfigError(where, f"must be an object with 'type' and 'name', got {data!r}")
    kind = data.get("type")
    name = data.get("name")
    try:
        if kind == "command":
            argv = data.get("argv", data.get("command"))
            if not isinstance(argv, str | list | tuple):
                raise ConfigError(f"{where}.argv", "must be a command line or argument list")
            return command(
                str(name),
                argv,
                timeout=data.get("timeout") or 300.0,
                shell=bool(data.get("shell", False)),
                cwd=data.get("cwd"),
                env=data.get("env"),
            )
        if kind == "pattern":
            return pattern(
                str(name),
                data.get("pattern"),  # type: ignore[arg-type]
                must_match=bool(data.get("must_match", True)),
                target=data.get("target", "output"),
                ignore_case=bool(data.get("ignore_case", False)),
            )
        if kind == "coverage":
            return coverage(str(name), data.get("report"), minimum=data.get("minimum"))  # type: ignore[arg-type]
        if kind == "predicate":
            _check_name(name)
            return PredicateRule(str(name), None)
    except ConfigError as exc:
        raise ConfigError(f"{where}.{exc.field.rpartition('.')[2]}", exc.detail) from None
    raise ConfigError(
        f"{where}.type", f"unknown rule type {kind!r}; use command, pattern, coverage or predicate"
    )


def evaluate_all(rules: Sequence[Rule], submission: Submission) -> ValidationReport:
    """Evaluate every rule in order (all of them: the feedback wants every failure)."""
    return ValidationReport(tuple(rule.evaluate(submission) for rule in rules))
