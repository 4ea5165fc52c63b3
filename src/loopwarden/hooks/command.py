"""Command hooks in Claude Code's format: shell commands that may veto a loop's stop.

Settings come from three files, all of which run (user, project, local)::

    ~/.loopwarden/settings.json
    <workdir>/.loopwarden/settings.json
    <workdir>/.loopwarden/settings.local.json

each shaped like Claude Code's settings::

    {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "...", "timeout": 30}]}],
               "SubagentStop": [{"matcher": "test-runner", "hooks": [...]}]}}

When a root loop is about to complete its ``Stop`` hooks run; for a child loop (one started
with a ``parent_id``, standing for a subagent) its ``SubagentStop`` hooks run, filtered by the
group's ``matcher`` (a regular expression that must match the whole ``agent_type`` in the
loop's metadata; absent, ``""`` or ``"*"`` match every agent). The hooks of one event run in
parallel, an identical command once. Each gets one JSON object on stdin and answers with
Claude Code's semantics:

- exit 0 and a JSON object with ``"decision": "block"`` → veto, ``reason`` is the feedback;
  ``"continue": false`` wins over any block and allows the stop with ``stopReason``;
- exit 0 with no JSON, or output that is not JSON → the stop proceeds;
- exit 2 → veto with stderr as the reason;
- any other exit, a command that cannot start, or a timeout (the whole process group is
  killed) → a warning, and the stop proceeds.

A settings file that is not JSON, or an entry of the wrong shape, is logged as a warning naming
the file and the entry and kept in :attr:`CommandHooks.problems`; only that entry is disabled.
The agent's output only ever travels on stdin, never on a command line.

Loop prevention: after ``max_continuations`` vetoes in a row the hooks are not run and the stop
is allowed, recorded as forced. The engine enforces the same limit on every stop checker through
``LoopConfig.max_stop_retries`` (default 3); the lower of the two applies.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from loopwarden import process
from loopwarden.errors import ConfigError
from loopwarden.hooks.base import StopContext
from loopwarden.logs import get_logger
from loopwarden.model import StopCheck

if TYPE_CHECKING:
    from loopwarden.engine import LoopEngine

__all__ = [
    "DEFAULT_MAX_CONTINUATIONS",
    "DEFAULT_TIMEOUT",
    "CommandHook",
    "CommandHooks",
    "HookRun",
    "HookSettings",
    "SettingsProblem",
    "interpret",
    "load_settings",
    "matcher_matches",
    "settings_paths",
    "transcript_path",
    "write_transcript",
]

STOP = "Stop"
SUBAGENT_STOP = "SubagentStop"
DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_CONTINUATIONS = 3
DEFAULT_MAX_OUTPUT = 1_000_000
_GRACE = 1.0


@dataclass(frozen=True, slots=True)
class SettingsProblem:
    """A settings file or entry that was ignored, and why."""

    path: str
    entry: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.entry}: {self.message}"


@dataclass(frozen=True, slots=True)
class CommandHook:
    """One configured command: its event, the group's matcher, and where it was declared."""

    event: str
    command: str
    timeout: float = DEFAULT_TIMEOUT
    matcher: str | None = None
    source: str = ""
    entry: str = ""


@dataclass(frozen=True, slots=True)
class HookSettings:
    """Every valid hook from the settings files, and every problem found in them."""

    hooks: tuple[CommandHook, ...] = ()
    problems: tuple[SettingsProblem, ...] = ()
    files: tuple[str, ...] = ()

    def for_event(self, event: str, agent_type: str | None = None) -> list[CommandHook]:
        """The hooks that run for ``event``: matched against ``agent_type``, each command once."""
        chosen: dict[str, CommandHook] = {}
        for hook in self.hooks:
            if hook.event != event or hook.command in chosen:
                continue
            if event == SUBAGENT_STOP and not matcher_matches(hook.matcher, agent_type):
                continue
            chosen[hook.command] = hook
        return list(chosen.values())


def matcher_matches(matcher: str | None, agent_type: str | None) -> bool:
    """Claude Code's matcher: absent, ``""`` or ``"*"`` match all; else a full regex match."""
    if matcher is None or matcher in ("", "*"):
        return True
    return re.fullmatch(matcher, agent_type or "") is not None


def settings_paths(
    workdir: str | os.PathLike[str], home: str | os.PathLike[str] | None = None
) -> list[Path]:
    """The settings files, in the order their hooks are listed: user, project, local."""
    user_root = Path(home) if home is not None else Path.home()
    project = Path(workdir)
    return [
        user_root / ".loopwarden" / "settings.json",
        project / ".loopwarden" / "settings.json",
        project / ".loopwarden" / "settings.local.json",
    ]


def load_settings(
    workdir: str | os.PathLike[str], *, home: str | os.PathLike[str] | None = None
) -> HookSettings:
    """Read every settings file that exists; a bad file or entry becomes a problem, not an error."""
    hooks: list[CommandHook] = []
    problems: list[SettingsProblem] = []
    files: list[str] = []
    seen: set[Path] = set()
    for path in settings_paths(workdir, home):
        resolved = path.resolve()
        if resolved in seen or not path.is_file():
            continue
        seen.add(resolved)
        files.append(str(path))
        _load_file(path, hooks, problems)
    return HookSettings(tuple(hooks), tuple(problems), tuple(files))


def _load_file(path: Path, hooks: list[CommandHook], problems: list[SettingsProblem]) -> None:
    where = str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(SettingsProblem(where, "(file)", f"cannot be read: {exc}"))
        return
    except ValueError as exc:
        problems.append(SettingsProblem(where, "(file)", f"is not valid JSON: {exc}"))
        return
    if not isinstance(data, dict):
        problems.append(SettingsProblem(where, "(file)", "must hold a JSON object"))
        return
    section = data.get("hooks")
    if section is None:
        return
    if not isinstance(section, dict):
        problems.append(SettingsProblem(where, "hooks", "must be an object of events"))
        return
    for event in (STOP, SUBAGENT_STOP):
        groups = section.get(event)
        if groups is None:
            continue
        if not isinstance(groups, list):
            problems.append(SettingsProblem(where, f"hooks.{event}", "must be a list of groups"))
            continue
        for g, group in enumerate(groups):
            _load_group(where, event, f"hooks.{event}[{g}]", group, hooks, problems)


def _load_group(
    where: str,
    event: str,
    entry: str,
    group: object,
    hooks: list[CommandHook],
    problems: list[SettingsProblem],
) -> None:
    if not isinstance(group, dict):
        problems.append(SettingsProblem(where, entry, "must be an object with a 'hooks' list"))
        return
    matcher = group.get("matcher")
    if matcher is not None:
        if not isinstance(matcher, str):
            problems.append(SettingsProblem(where, f"{entry}.matcher", "must be a string"))
            return
        if matcher not in ("", "*"):
            try:
                re.compile(matcher)
            except re.error as exc:
                problems.append(
                    SettingsProblem(where, f"{entry}.matcher", f"invalid regex {matcher!r}: {exc}")
                )
                return
    items = group.get("hooks")
    if not isinstance(items, list):
        problems.append(SettingsProblem(where, f"{entry}.hooks", "must be a list of hooks"))
        return
    for h, item in enumerate(items):
        hook_entry = f"{entry}.hooks[{h}]"
        hook = _parse_hook(event, item, matcher, where, hook_entry)
        if isinstance(hook, SettingsProblem):
            problems.append(hook)
        else:
            hooks.append(hook)


def _parse_hook(
    event: str, item: object, matcher: str | None, where: str, entry: str
) -> CommandHook | SettingsProblem:
    if not isinstance(item, dict):
        return SettingsProblem(where, entry, "must be an object with 'type' and 'command'")
    kind = item.get("type")
    if kind != "command":
        return SettingsProblem(
            where, entry, f"unsupported hook type {kind!r}; loopwarden runs type 'command' only"
        )
    command = item.get("command")
    if not isinstance(command, str) or not command.strip():
        return SettingsProblem(where, entry, "'command' must be a non-empty string")
    timeout = item.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        return SettingsProblem(
            where, entry, f"'timeout' must be a number of seconds > 0, got {timeout!r}"
        )
    return CommandHook(event, command, float(timeout), matcher, where, entry)


Verdict = Literal["allow", "block", "stop"]


@dataclass(frozen=True, slots=True)
class HookRun:
    """One hook's run and what it meant: allow, block (veto) or stop (``continue: false``)."""

    hook: CommandHook
    result: process.ProcessResult
    verdict: Verdict
    reason: str = ""
    warning: str | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": self.hook.command,
            "source": self.hook.source,
            "verdict": self.verdict,
            "reason": self.reason,
            "warning": self.warning,
            "notes": list(self.notes),
            "returncode": self.result.returncode,
            "timed_out": self.result.timed_out,
            "duration": round(self.result.duration, 3),
        }


def _truncation_notes(result: process.ProcessResult, limit: int) -> tuple[str, ...]:
    notes = []
    if result.stdout_truncated:
        notes.append(f"stdout truncated to its first {limit} bytes; the rest was dropped")
    if result.stderr_truncated:
        notes.append(f"stderr truncated to its first {limit} bytes; the rest was dropped")
    return tuple(notes)


def interpret(
    hook: CommandHook, result: process.ProcessResult, limit: int = DEFAULT_MAX_OUTPUT
) -> HookRun:
    """What Claude Code would make of this exit status and output."""
    notes = _truncation_notes(result, limit)
    label = f"hook {hook.command!r}"
    if result.error:
        warning = f"{label} could not run ({result.error}); stop allowed"
        return HookRun(hook, result, "allow", warning=warning, notes=notes)
    if result.timed_out:
        warning = (
            f"{label} timed out after {hook.timeout:g}s; its process group was killed; stop allowed"
        )
        return HookRun(hook, result, "allow", warning=warning, notes=notes)
    if result.returncode == 2:
        reason = result.stderr.strip() or f"{label} exited 2 with nothing on stderr"
        return HookRun(hook, result, "block", reason, notes=notes)
    if result.returncode != 0:
        tail = result.stderr.strip()[-300:]
        warning = f"{label} exited with status {result.returncode}; stop allowed" + (
            f": {tail}" if tail else ""
        )
        return HookRun(hook, result, "allow", warning=warning, notes=notes)
    text = result.stdout.strip()
    if not text.startswith("{"):
        return HookRun(hook, result, "allow", notes=notes)
    try:
        answer = json.loads(text)
    except ValueError:
        note = "stdout starts with '{' but is not valid JSON; treated as no answer"
        return HookRun(hook, result, "allow", notes=(*notes, note))
    if not isinstance(answer, dict):
        return HookRun(hook, result, "allow", notes=notes)
    if answer.get("continue") is False:
        reason = str(answer.get("stopReason") or f"{label} answered continue: false")
        return HookRun(hook, result, "stop", reason, notes=notes)
    if answer.get("decision") == "block":
        reason = str(answer.get("reason") or f"{label} blocked the stop without a reason")
        return HookRun(hook, result, "block", reason, notes=notes)
    return HookRun(hook, result, "allow", notes=notes)


def combine(source: str, runs: Sequence[HookRun]) -> StopCheck:
    """One answer from several hooks: ``continue: false`` wins, then any block blocks."""
    notes = [n for run in runs for n in (*((run.warning,) if run.warning else ()), *run.notes)]
    suffix = "".join(f"\n[{n}]" for n in notes)
    stops = [r for r in runs if r.verdict == "stop"]
    if stops:
        return StopCheck(source, True, "\n".join(r.reason for r in stops) + suffix)
    blocks = [r for r in runs if r.verdict == "block"]
    if blocks:
        return StopCheck(source, False, "\n".join(r.reason for r in blocks) + suffix)
    return StopCheck(source, True, f"{len(runs)} command hook(s) allowed the stop" + suffix)


def transcript_path(workdir: str | os.PathLike[str], loop_id: str) -> Path:
    """Where loopwarden keeps a loop's transcript in Claude Code's line format."""
    return Path(workdir) / ".loopwarden" / "transcripts" / f"{loop_id}.jsonl"


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _transcript_state(path: Path) -> tuple[set[int], str | None]:
    """Iterations already written and the last line's uuid; a torn last line is cut off."""
    if not path.exists():
        return set(), None
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with path.open("r+b") as fh:
            fh.truncate(cut)
        data = data[:cut]
    done: set[int] = set()
    last: str | None = None
    for line in data.decode("utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            entry = json.loads(line)
            last = entry.get("uuid", last)
            if entry.get("type") == "assistant":
                done.add(int(entry["loopwarden"]["iteration"]))
    return done, last


def write_transcript(
    path: Path,
    *,
    loop_id: str,
    cwd: str,
    turns: Sequence[tuple[int, str, str]],
    sidechain: bool = False,
) -> Path:
    """Append the (iteration, prompt, output) turns not yet in the transcript, in order.

    Each turn is a user line with the prompt (left out when empty) and an assistant line whose
    ``message.content`` is one text block, the way Claude Code writes its session transcripts.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    done, parent = _transcript_state(path)
    lines: list[str] = []
    for iteration, prompt, output in sorted(turns):
        if iteration in done:
            continue
        done.add(iteration)
        common: dict[str, Any] = {
            "isSidechain": sidechain,
            "userType": "external",
            "cwd": cwd,
            "sessionId": loop_id,
            "version": "loopwarden",
            "timestamp": _now_iso(),
            "loopwarden": {"iteration": iteration},
        }
        if prompt:
            uid = f"{loop_id}-{iteration}-user"
            message: dict[str, Any] = {"role": "user", "content": prompt}
            lines.append(
                json.dumps(
                    {
                        "parentUuid": parent,
                        **common,
                        "type": "user",
                        "message": message,
                        "uuid": uid,
                    }
                )
            )
            parent = uid
        aid = f"{loop_id}-{iteration}-assistant"
        reply: dict[str, Any] = {
            "id": f"msg_{loop_id}_{iteration}",
            "type": "message",
            "role": "assistant",
            "model": "loopwarden",
            "content": [{"type": "text", "text": output}],
            "stop_reason": "end_turn",
        }
        lines.append(
            json.dumps(
                {
                    "parentUuid": parent,
                    **common,
                    "type": "assistant",
                    "message": reply,
                    "uuid": aid,
                }
            )
        )
        parent = aid
    if lines:
        with path.open("a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    return path


@dataclass
class CommandHooks:
    """A stop checker running Claude Code-style command hooks from the settings files.

    ``home`` replaces the home directory the user settings are read from. ``engine``, when
    given, lets the transcript carry every iteration's prompt (read from the loop's history);
    without it the transcript holds the outputs of the iterations checked. ``max_continuations``
    caps consecutive vetoes; the engine's ``LoopConfig.max_stop_retries`` caps them too.
    """

    home: str | os.PathLike[str] | None = None
    max_continuations: int = DEFAULT_MAX_CONTINUATIONS
    max_output: int = DEFAULT_MAX_OUTPUT
    permission_mode: str = "default"
    engine: LoopEngine | None = None
    name: str = "command-hooks"
    problems: tuple[SettingsProblem, ...] = field(default=(), init=False)
    last_runs: tuple[HookRun, ...] = field(default=(), init=False)
    _reported: set[SettingsProblem] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        for name, minimum in (("max_continuations", 0), ("max_output", 1000)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(name, f"must be an integer >= {minimum}, got {value!r}")

    def settings(self, workdir: str | os.PathLike[str]) -> HookSettings:
        """Load the settings for a project, logging each new problem once."""
        loaded = load_settings(workdir, home=self.home)
        self.problems = loaded.problems
        log = get_logger()
        for problem in loaded.problems:
            if problem not in self._reported:
                self._reported.add(problem)
                log.warning(
                    "hook_settings_problem",
                    file=problem.path,
                    entry=problem.entry,
                    problem=problem.message,
                )
        return loaded

    def check(self, context: StopContext) -> StopCheck | None:
        """Run the loop's Stop (or SubagentStop) hooks; None when no hook applies."""
        workdir = context.workdir or os.getcwd()
        event = SUBAGENT_STOP if context.parent_id else STOP
        agent_type = context.metadata.get("agent_type")
        agent = agent_type if isinstance(agent_type, str) else None
        hooks = self.settings(workdir).for_event(event, agent)
        self.last_runs = ()
        if not hooks:
            return None
        if context.retry_count >= self.max_continuations:
            return StopCheck(
                self.name,
                True,
                f"stop allowed after {context.retry_count} hook-caused continuations in a row "
                f"(max_continuations={self.max_continuations})",
                forced=True,
            )
        transcript = self._transcript(context, workdir)
        payload = self._payload(context, event, agent, workdir, transcript)
        env = {
            "LOOPWARDEN_PROJECT_DIR": workdir,
            "CLAUDE_PROJECT_DIR": workdir,
            "LOOPWARDEN_STOP_HOOK_ACTIVE": "true" if context.stop_hook_active else "false",
            "LOOPWARDEN_TRANSCRIPT_PATH": str(transcript),
        }
        stdin = json.dumps(payload, ensure_ascii=False)

        def run_one(hook: CommandHook) -> HookRun:
            result = process.run(
                hook.command,
                shell=True,
                input=stdin,
                timeout=hook.timeout,
                cwd=workdir,
                extra_env=env,
                max_output=self.max_output,
                keep="head",
                grace=_GRACE,
            )
            return interpret(hook, result, self.max_output)

        with ThreadPoolExecutor(
            max_workers=len(hooks), thread_name_prefix="loopwarden-hook"
        ) as pool:
            runs = tuple(pool.map(run_one, hooks))
        self.last_runs = runs
        log = get_logger()
        for run in runs:
            if run.warning:
                log.warning("command_hook_warning", loop_id=context.loop_id, warning=run.warning)
            log.info("command_hook", loop_id=context.loop_id, hook_event=event, **run.to_dict())
        return combine(self.name, runs)

    def _transcript(self, context: StopContext, workdir: str) -> Path:
        path = transcript_path(workdir, context.loop_id)
        turns: list[tuple[int, str, str]] = []
        prompt = ""
        if self.engine is not None:
            with contextlib.suppress(Exception):
                turns = [
                    (r.iteration, r.prompt, r.output)
                    for r in self.engine.history(context.loop_id)
                    if r.iteration < context.iteration
                ]
                prompt = self.engine.get(context.loop_id).current_prompt
        turns.append((context.iteration, prompt, context.output))
        try:
            return write_transcript(
                path,
                loop_id=context.loop_id,
                cwd=workdir,
                turns=turns,
                sidechain=context.parent_id is not None,
            )
        except OSError as exc:
            get_logger().warning("transcript_write_failed", path=str(path), error=str(exc))
            return path

    def _payload(
        self,
        context: StopContext,
        event: str,
        agent_type: str | None,
        workdir: str,
        transcript: Path,
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "session_id": context.loop_id,
            "transcript_path": str(transcript),
            "cwd": workdir,
            "permission_mode": self.permission_mode,
            "hook_event_name": event,
            "stop_hook_active": context.stop_hook_active,
            "last_assistant_message": context.output,
            "loopwarden_iteration": context.iteration,
            "loopwarden_max_iterations": context.max_iterations,
            "loopwarden_consecutive_blocks": context.retry_count,
            "loopwarden_task_id": context.task_id,
        }
        if event == SUBAGENT_STOP:
            payload.update(
                agent_id=context.loop_id,
                agent_type=agent_type,
                agent_transcript_path=str(transcript),
                loopwarden_parent_id=context.parent_id,
            )
        return payload
