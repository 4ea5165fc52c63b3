"""loopwarden as Claude Code's Stop hook: a durable, guarded ralph loop in a Claude Code session.

``loopwarden claude start`` creates a loop for the project (the current directory) in
``<project>/.loopwarden/loopwarden.db`` and writes one Stop hook entry into
``.claude/settings.local.json``. Each time Claude Code is about to stop, it runs
``loopwarden claude stop-hook``, which :func:`run_stop_hook` implements:

1. find the project's active loop (none: exit 0 with no output, Claude Code stops as usual);
2. bind the loop to the Claude Code session the first time, and ignore every other session;
3. take ``last_assistant_message``, or the last assistant text of the transcript;
4. submit it to the engine (rules run, guards decide);
5. answer ``{"decision": "block", "reason": <prompt + feedback>, "systemMessage": ...}`` to
   keep Claude working, or only a ``systemMessage`` with the outcome to let it stop.

Every step runs under a per-project file lock, so two sessions stopping at once cannot both
claim the loop. Whatever goes wrong inside, the hook never traps the user: it reports the error
on stderr and in a ``systemMessage``, logs it, and exits 0 so Claude Code stops normally. The
loop's state lives in the database (the session binding in a small JSON file beside it), so a
crash or a Claude Code restart loses nothing: the next call resumes the loop where it was.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import sys
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopwarden import rules
from loopwarden.engine import LoopEngine
from loopwarden.hooks.command import CommandHooks
from loopwarden.logs import get_logger
from loopwarden.model import Decision, LoopConfig, LoopSnapshot, Signal, State

__all__ = [
    "HOOK_MARKER",
    "TASK_ID",
    "HookResponse",
    "ensure_stop_hook",
    "find_active_loop",
    "hook_command",
    "last_assistant_text",
    "neutralize_quoted_promises",
    "project_db_url",
    "remove_stop_hook",
    "run_stop_hook",
    "session_binding",
    "start_loop",
]

TASK_ID = "claude-code"
HOOK_MARKER = "claude stop-hook"
HOOK_TIMEOUT = 600
# Validation may outlast the engine's default lease; a crashed hook's lease is taken over at
# once anyway (its pid is gone), so a long lease costs nothing.
_LEASE_TTL = 3600.0
_TRANSCRIPT_TAIL = 4_000_000
_STATE_DIR = ".loopwarden"
_BINDINGS = "claude-sessions.json"
_LOCK = "claude.lock"
_ERROR_LOG = "claude-stop-hook.log"


# ----- where things live ----------------------------------------------------------------------


def project_db_url(project: Path) -> str:
    """The project's database: ``<project>/.loopwarden/loopwarden.db``."""
    return "sqlite:///" + str(project / _STATE_DIR / "loopwarden.db")


def _find_project(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` holding a loopwarden database."""
    for candidate in (start, *start.parents):
        if (candidate / _STATE_DIR / "loopwarden.db").is_file():
            return candidate
    return None


def open_engine(project: Path, db_url: str | None, *, create: bool) -> LoopEngine:
    """An engine on the project's database, with the project's command hooks as stop checks."""
    hooks = CommandHooks()
    engine = LoopEngine(
        db_url or project_db_url(project),
        create=create,
        lease_ttl=_LEASE_TTL,
        stop_checkers=[hooks],
    )
    hooks.engine = engine
    return engine


def find_active_loop(engine: LoopEngine, project: Path) -> LoopSnapshot | None:
    """The newest live (non-terminal) Claude Code loop of this project."""
    live = [
        loop
        for loop in engine.list(task_id=TASK_ID)
        if not loop.terminal and loop.metadata.get("project") == str(project)
    ]
    return live[-1] if live else None


def find_latest_loop(engine: LoopEngine, project: Path) -> LoopSnapshot | None:
    """The newest Claude Code loop of this project, live or not."""
    mine = str(project)
    loops = [loop for loop in engine.list(task_id=TASK_ID) if loop.metadata.get("project") == mine]
    return loops[-1] if loops else None


@contextlib.contextmanager
def project_lock(project: Path) -> Iterator[None]:
    """Serialise every hook call of a project (two sessions stopping at once take turns)."""
    state = project / _STATE_DIR
    state.mkdir(parents=True, exist_ok=True)
    with (state / _LOCK).open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


# ----- the session binding ----------------------------------------------------------------------


def _bindings_path(project: Path) -> Path:
    return project / _STATE_DIR / _BINDINGS


def _read_bindings(project: Path) -> dict[str, Any]:
    try:
        data = json.loads(_bindings_path(project).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_bindings(project: Path, data: Mapping[str, Any]) -> None:
    _atomic_write(_bindings_path(project), json.dumps(data, indent=2, sort_keys=True) + "\n")


def session_binding(project: Path, loop_id: str) -> str | None:
    """The Claude Code session a loop is bound to, if any."""
    entry = _read_bindings(project).get(loop_id)
    if isinstance(entry, dict) and isinstance(entry.get("session_id"), str):
        return str(entry["session_id"])
    return None


def bind_session(project: Path, loop_id: str, session_id: str) -> None:
    """Bind a loop to a session (call under :func:`project_lock`)."""
    data = _read_bindings(project)
    data[loop_id] = {"session_id": session_id, "bound_at": time.time()}
    _write_bindings(project, data)


def release_session(project: Path, loop_id: str) -> str | None:
    """Forget a loop's session (the next session that stops takes it over); the old one."""
    with project_lock(project):
        data = _read_bindings(project)
        old = data.pop(loop_id, None)
        _write_bindings(project, data)
    return old.get("session_id") if isinstance(old, dict) else None


# ----- the agent's output ------------------------------------------------------------------------


def _text_of(message: object) -> str:
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [
        str(block.get("text", ""))
        for block in content
        if isinstance(block, dict) and block.get("type") == "text"
    ]
    return "\n".join(p for p in parts if p)


def last_assistant_text(path: str | os.PathLike[str]) -> str | None:
    """The text of the last assistant message in a Claude Code transcript (JSONL).

    Lines that do not parse (a partly written last line while Claude Code is still flushing)
    are skipped. An assistant message written as several lines sharing one ``message.id`` is
    joined. Only the tail of a very long transcript is read.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
        with p.open("rb") as fh:
            if size > _TRANSCRIPT_TAIL:
                fh.seek(size - _TRANSCRIPT_TAIL)
                fh.readline()
            raw = fh.read()
    except OSError:
        return None
    entries: list[tuple[str | None, str]] = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("type") != "assistant":
            continue
        if entry.get("isSidechain") is True:
            continue
        message = entry.get("message")
        msg_id = message.get("id") if isinstance(message, dict) else None
        entries.append((msg_id if isinstance(msg_id, str) else None, _text_of(message)))
    for i in range(len(entries) - 1, -1, -1):
        msg_id, text = entries[i]
        if not text:
            continue
        if msg_id is None:
            return text
        texts = [text]
        for earlier_id, earlier_text in reversed(entries[:i]):
            if earlier_id != msg_id:
                break
            if earlier_text:
                texts.insert(0, earlier_text)
        return "\n".join(texts)
    return None


_TAG = re.compile(r"<promise>\s*(?P<word>\w+)[^<]*</promise>", re.IGNORECASE)
_WORDS = re.compile(r"\w+")
_QUOTES = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019", "\u00ab": "\u00bb"}
_CONTEXT_WORDS = 3
_DEFUSED = "«promise»"
_QUOTED_NOTE = (
    "\n\nNote: the promise tag in your last message repeated the wording of the prompt, so it "
    "was read as a quotation, not as a promise. To claim completion, put the promise tag on a "
    "line of its own."
)


def _around(text: str, start: int, end: int) -> tuple[list[str], list[str]]:
    """Up to three words before and after a span, on the same line, lower-cased."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    before = [w.lower() for w in _WORDS.findall(text[line_start:start])][-_CONTEXT_WORDS:]
    after = [w.lower() for w in _WORDS.findall(text[end:line_end])][:_CONTEXT_WORDS]
    return before, after


def _same_side(a: Sequence[str], b: Sequence[str], *, tail: bool) -> bool:
    n = min(len(a), len(b))
    if n < 2:
        return False
    return list(a[-n:] if tail else a[:n]) == list(b[-n:] if tail else b[:n])


def _wrapped_in_quotes(text: str, start: int, end: int) -> bool:
    if start == 0 or end >= len(text):
        return False
    closing = _QUOTES.get(text[start - 1])
    return closing is not None and text[end] == closing


def neutralize_quoted_promises(output: str, sources: Sequence[str]) -> str:
    """Defuse promise tags the agent quotes instead of makes.

    A tag counts as quoted when it sits between quotation marks, or when its words on either
    side (at least two of the three nearest, on the same line) repeat the words around a tag
    with the same word in one of ``sources`` (the loop's prompt and the feedback Claude was
    given). So "the prompt says to output <promise>COMPLETE</promise> when every test passes"
    is quoting "Output <promise>COMPLETE</promise> when every test passes.", while a tag alone
    on its line or after the agent's own words is a promise. A quoted tag is rewritten as
    ``«promise»WORD«/promise»``, which promise detection does not read.
    """
    quoted_contexts: list[tuple[str, list[str], list[str]]] = []
    for source in sources:
        for m in _TAG.finditer(source):
            before, after = _around(source, m.start(), m.end())
            quoted_contexts.append((m.group("word").upper(), before, after))

    def replace(m: re.Match[str]) -> str:
        text = m.string
        quoted = _wrapped_in_quotes(text, m.start(), m.end())
        if not quoted:
            before, after = _around(text, m.start(), m.end())
            word = m.group("word").upper()
            quoted = any(
                w == word and (_same_side(before, b, tail=True) or _same_side(after, a, tail=False))
                for w, b, a in quoted_contexts
            )
        if not quoted:
            return m.group(0)
        return m.group(0).replace("<promise>", _DEFUSED, 1).replace("</promise>", "«/promise»")

    return _TAG.sub(replace, output)


# ----- .claude/settings.local.json ----------------------------------------------------------------


def hook_command(db_url: str | None = None) -> str:
    """The command line Claude Code runs: this installation's ``loopwarden claude stop-hook``.

    The console script beside the running interpreter when there is one, else
    ``<python> -m loopwarden.cli``: either way it does not depend on Claude Code's PATH.
    """
    script = Path(sys.executable).parent / "loopwarden"
    if script.is_file() and os.access(script, os.X_OK):
        base = shlex.quote(str(script))
    else:
        base = f"{shlex.quote(sys.executable)} -m loopwarden.cli"
    command = f"{base} {HOOK_MARKER}"
    if db_url:
        command += f" --db {shlex.quote(db_url)}"
    return command


def _is_ours(hook: object) -> bool:
    if not isinstance(hook, dict):
        return False
    command = hook.get("command")
    return isinstance(command, str) and "loopwarden" in command and HOOK_MARKER in command


class SettingsFileError(Exception):
    """``.claude/settings.local.json`` cannot be updated without losing what is in it."""


def _load_settings(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except ValueError as exc:
        raise SettingsFileError(
            f"{path} is not valid JSON ({exc}); fix or remove it, then run this again"
        ) from None
    if not isinstance(data, dict):
        raise SettingsFileError(f"{path} must hold a JSON object; fix it, then run this again")
    return data


def _stop_groups(data: dict[str, Any], path: Path) -> list[Any]:
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsFileError(f"{path}: 'hooks' must be an object; fix it, then run this again")
    stop = hooks.setdefault("Stop", [])
    if not isinstance(stop, list):
        raise SettingsFileError(f"{path}: 'hooks.Stop' must be a list; fix it, then run this again")
    return stop


def _without_ours(groups: list[Any]) -> list[Any]:
    kept: list[Any] = []
    for group in groups:
        if isinstance(group, dict) and isinstance(group.get("hooks"), list):
            inner = [h for h in group["hooks"] if not _is_ours(h)]
            if not inner and group["hooks"]:
                continue
            group = {**group, "hooks": inner}
        kept.append(group)
    return kept


def ensure_stop_hook(path: Path, command: str, timeout: int = HOOK_TIMEOUT) -> bool:
    """Make ``command`` the one loopwarden Stop hook in ``path``; True when the file changed.

    Everything else in the file is kept as it was; an older loopwarden entry is replaced.
    """
    data = _load_settings(path)
    before = json.dumps(data, sort_keys=True)
    stop = _stop_groups(data, path)
    ours = {"type": "command", "command": command, "timeout": timeout}
    stop[:] = [*_without_ours(stop), {"hooks": [ours]}]
    if json.dumps(data, sort_keys=True) == before and path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, json.dumps(data, indent=2) + "\n")
    return True


def remove_stop_hook(path: Path) -> bool:
    """Remove loopwarden's Stop hook from ``path``; True when the file changed."""
    if not path.exists():
        return False
    data = _load_settings(path)
    before = json.dumps(data, sort_keys=True)
    hooks = data.get("hooks")
    if not isinstance(hooks, dict) or not isinstance(hooks.get("Stop"), list):
        return False
    hooks["Stop"] = _without_ours(hooks["Stop"])
    if not hooks["Stop"]:
        del hooks["Stop"]
    if json.dumps(data, sort_keys=True) == before:
        return False
    _atomic_write(path, json.dumps(data, indent=2) + "\n")
    return True


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def settings_local_path(project: Path) -> Path:
    """``<project>/.claude/settings.local.json``."""
    return project / ".claude" / "settings.local.json"


# ----- start / cancel ----------------------------------------------------------------------------


class ClaudeLoopError(Exception):
    """A ``loopwarden claude`` command cannot do what was asked; the message says why."""


def start_loop(
    project: Path,
    prompt: str,
    *,
    max_iterations: int = 15,
    circuit_breaker: int = 3,
    completion_promise: str = "COMPLETE",
    validate: Sequence[str] = (),
    validate_timeout: float = 300.0,
    db_url: str | None = None,
) -> tuple[LoopSnapshot, bool]:
    """Create the project's loop and install the Stop hook; the loop and whether settings changed.

    ``validate`` commands are the user's own shell commands (run through a shell, in the
    project); each is a rule that must pass before a completion promise is accepted.
    """
    project = project.resolve()
    if not prompt.strip():
        raise ClaudeLoopError("the prompt is empty; pass it as an argument or with --prompt-file")
    (project / _STATE_DIR).mkdir(parents=True, exist_ok=True)
    config = LoopConfig(
        max_iterations=max_iterations,
        circuit_breaker_threshold=circuit_breaker,
        completion_promises=(completion_promise,),
        rules=tuple(
            rules.command(f"validate-{i}", cmd, shell=True, timeout=validate_timeout)
            for i, cmd in enumerate(validate, 1)
        ),
        workdir=str(project),
    )
    engine = open_engine(project, db_url, create=True)
    try:
        with project_lock(project):
            active = find_active_loop(engine, project)
            if active is not None:
                raise ClaudeLoopError(
                    f"loop {active.id} is already active in {project} (iteration "
                    f"{active.iteration}/{active.max_iterations}); run `loopwarden claude cancel` "
                    "first"
                )
            loop = engine.start(
                TASK_ID,
                config,
                prompt=prompt,
                metadata={"integration": "claude-code", "project": str(project)},
            )
    finally:
        engine.close()
    changed = ensure_stop_hook(settings_local_path(project), hook_command(db_url))
    return loop, changed


def cancel_loop(project: Path, db_url: str | None = None) -> LoopSnapshot | None:
    """Block the project's active loop as the user's decision; None when there is none."""
    project = project.resolve()
    if db_url is None and _find_project(project) != project:
        return None
    engine = open_engine(project, db_url, create=False)
    try:
        with project_lock(project):
            active = find_active_loop(engine, project)
            if active is None:
                return None
            return engine.block(active.id, "cancelled by the user (loopwarden claude cancel)")
    finally:
        engine.close()


def loop_status(project: Path, db_url: str | None = None) -> dict[str, Any] | None:
    """The project's active loop (or its latest one) as a JSON object; None when there is none."""
    project = project.resolve()
    if db_url is None and _find_project(project) != project:
        return None
    engine = open_engine(project, db_url, create=False)
    try:
        loop = find_active_loop(engine, project) or find_latest_loop(engine, project)
        if loop is None:
            return None
        loop = engine.get(loop.id)
        data = loop.to_dict()
        data["claude_session_id"] = session_binding(project, loop.id)
        data["hook_installed"] = _hook_installed(settings_local_path(project))
        return data
    finally:
        engine.close()


def _hook_installed(path: Path) -> bool:
    try:
        data = _load_settings(path)
    except SettingsFileError:
        return False
    hooks = data.get("hooks")
    stop = hooks.get("Stop") if isinstance(hooks, dict) else None
    return isinstance(stop, list) and any(
        _is_ours(h)
        for group in stop
        if isinstance(group, dict) and isinstance(group.get("hooks"), list)
        for h in group["hooks"]
    )


# ----- the stop hook --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HookResponse:
    """What the hook process prints and how it exits (always 0: it never traps the user)."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0


def _message(payload: Mapping[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False)


def _progress(loop: LoopSnapshot, decision: Decision) -> str:
    why = decision.reason.splitlines()[0] if decision.reason else ""
    return (
        f"loopwarden: iteration {decision.iteration}/{loop.max_iterations} done, "
        f"score {decision.score:g}; continuing: {why}"
    )


def _outcome(loop: LoopSnapshot) -> str:
    decision = loop.last_decision
    score = f", score {decision.score:g}" if decision else ""
    reason = loop.terminal_reason.value if loop.terminal_reason else loop.state.value
    text = (
        f"loopwarden: loop {loop.state.value} ({reason}) at iteration "
        f"{loop.iteration}/{loop.max_iterations}{score}: {loop.reason}"
    )
    if loop.state is not State.COMPLETED:
        text += " Run `loopwarden claude status` for details."
    return text


def _log_error(project: Path | None, text: str) -> None:
    get_logger().error("claude_stop_hook_failed", project=str(project), error=text)
    if project is None:
        return
    with contextlib.suppress(OSError):
        log = project / _STATE_DIR / _ERROR_LOG
        if log.parent.is_dir():
            with log.open("a", encoding="utf-8") as fh:
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
                fh.write(f"{stamp} {text}\n")


def run_stop_hook(
    stdin_text: str,
    *,
    env: Mapping[str, str] | None = None,
    db_url: str | None = None,
) -> HookResponse:
    """Handle one Stop hook call from Claude Code; never raises, always exits 0."""
    environ = os.environ if env is None else env
    project: Path | None = None
    try:
        payload = json.loads(stdin_text) if stdin_text.strip() else {}
        if not isinstance(payload, dict):
            raise ValueError("the hook input is not a JSON object")
        event = payload.get("hook_event_name")
        if event not in (None, "Stop"):
            return HookResponse()
        start = environ.get("CLAUDE_PROJECT_DIR") or payload.get("cwd") or os.getcwd()
        start_dir = Path(str(start)).resolve()
        project = start_dir if db_url else _find_project(start_dir)
        if project is None:
            return HookResponse()
        return _handle(project, payload, db_url)
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}"
        _log_error(project, detail + "\n" + traceback.format_exc())
        text = (
            f"loopwarden stop hook failed ({detail}); Claude Code may stop. The loop is safe in "
            "the database: see `loopwarden claude status`."
        )
        return HookResponse(stdout=_message({"systemMessage": text}), stderr=text + "\n")


def _handle(project: Path, payload: Mapping[str, Any], db_url: str | None) -> HookResponse:
    session = str(payload.get("session_id") or "")
    engine = open_engine(project, db_url, create=False)
    try:
        with project_lock(project):
            loop = find_active_loop(engine, project)
            if loop is None:
                return HookResponse()
            bound = session_binding(project, loop.id)
            if bound is not None and bound != session:
                return HookResponse()
            if bound is None:
                bind_session(project, loop.id, session)
            if loop.state is not State.EXECUTING:
                # A call that crashed left work half done: finish it from the stored state.
                loop = engine.resume(loop.id)
            if loop.terminal:
                return HookResponse(stdout=_message({"systemMessage": _outcome(loop)}))
            output = _agent_output(payload)
            cleaned = neutralize_quoted_promises(output, (loop.prompt, loop.current_prompt))
            defused = cleaned.count(_DEFUSED) > output.count(_DEFUSED)
            decision = engine.submit(loop.id, cleaned, context={"claude_session_id": session})
            after = engine.get(loop.id)
    finally:
        engine.close()
    if decision.signal is Signal.CONTINUE and not after.terminal:
        reason = after.current_prompt + (_QUOTED_NOTE if defused else "")
        return HookResponse(
            stdout=_message(
                {
                    "decision": "block",
                    "reason": reason,
                    "systemMessage": _progress(after, decision),
                }
            )
        )
    return HookResponse(stdout=_message({"systemMessage": _outcome(after)}))


def _agent_output(payload: Mapping[str, Any]) -> str:
    message = payload.get("last_assistant_message")
    if isinstance(message, str) and message.strip():
        return message
    transcript = payload.get("transcript_path")
    if isinstance(transcript, str) and transcript:
        path = Path(transcript).expanduser()
        if not path.is_absolute():
            path = Path(str(payload.get("cwd") or os.getcwd())) / path
        return last_assistant_text(path) or ""
    return ""
