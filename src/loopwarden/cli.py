"""The ``loopwarden`` command line: run an agent command in a durable loop, and look at loops.

Every command takes ``--db URL`` (default ``LOOPWARDEN_DATABASE_URL``, else
``.loopwarden/loopwarden.db`` in the working directory) and ``--json``. Errors the user can act
on (an unknown loop id, a missing or newer database, a bad flag) are one line on stderr and
exit status 2, never a traceback. The exit codes of ``run`` / ``resume`` are
:class:`loopwarden.runner.ExitCode`, documented in docs/cli.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from types import FrameType, TracebackType
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from loopwarden import process, rules
from loopwarden.engine import LoopEngine
from loopwarden.errors import (
    ConfigError,
    InvalidTransitionError,
    LeaseHeldError,
    LoopNotFoundError,
    LoopwardenError,
    SchemaVersionError,
)
from loopwarden.hooks import completion
from loopwarden.hooks.command import CommandHooks
from loopwarden.integrations.claude_cli import claude_app
from loopwarden.logs import configure_logging
from loopwarden.model import CompletionPolicy, LoopConfig, LoopSnapshot, State
from loopwarden.runner import (
    AgentFinished,
    AgentStarted,
    ExitCode,
    IterationDone,
    RunEvent,
    RunFinished,
    Runner,
    RunSettings,
    RunStarted,
    Terminated,
    agent_rule,
    event_lines,
    exit_code_for,
    fire_completion_hooks,
)

__all__ = ["app", "main"]

_PROG = "loopwarden"


class _Stderr:
    """A stream that writes to whatever ``sys.stderr`` is now (test runners swap it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def _print_error(message: str) -> None:
    sys.stderr.write(f"{_PROG}: error: {_one_line(message)}\n")
    sys.stderr.flush()


def _warn(message: str) -> None:
    sys.stderr.write(f"{_PROG}: warning: {_one_line(message)}\n")
    sys.stderr.flush()


class _Group(TyperGroup):
    """Typer's group, with usage errors and crashes reported as one line on stderr."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            code = super().main(
                args=args,
                prog_name=prog_name or _PROG,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
        except typer.TyperException as exc:
            # Typer's own (vendored click) usage errors: bad flags, missing options, no args.
            render = getattr(exc, "format_message", None)
            message = str(render()) if callable(render) else str(exc)
            code = int(getattr(exc, "exit_code", ExitCode.USAGE))
            if type(exc).__name__ == "NoArgsIsHelpError":
                sys.stdout.write(message + "\n")
            else:
                ctx = getattr(exc, "ctx", None)
                where = getattr(ctx, "command_path", None) or _PROG
                hint = f" (see '{where} --help')" if code == ExitCode.USAGE else ""
                _print_error(message + hint)
        except typer.Abort:
            code = ExitCode.INTERRUPTED
        except Exception as exc:
            if os.environ.get("LOOPWARDEN_DEBUG"):
                traceback.print_exc()
            _print_error(
                f"internal error: {type(exc).__name__}: {exc} "
                "(set LOOPWARDEN_DEBUG=1 for the traceback)"
            )
            code = ExitCode.FAILED
        code = int(code or 0) if isinstance(code, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    cls=_Group,
    name=_PROG,
    help="A durable loop engine for agent iteration loops: run an agent command until its "
    "work is verified, with guards, checkpoints and exact resume.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log every transition to stderr.")
    ] = False,
    log_format: Annotated[
        str, typer.Option("--log-format", help="Log format on stderr: console or json.")
    ] = "console",
) -> None:
    """Set up logging: structured events go to stderr, so stdout stays the command's own."""
    if log_format not in ("console", "json"):
        raise typer.BadParameter("must be console or json", param_hint="--log-format")
    configure_logging(
        "json" if log_format == "json" else "console",
        "info" if verbose else "warning",
        stream=_Stderr(),  # type: ignore[arg-type]
    )


app.add_typer(claude_app, name="claude")


# ----- shared options and helpers ------------------------------------------------------------

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        metavar="URL",
        help="Database URL or SQLite file path (default: LOOPWARDEN_DATABASE_URL, else "
        ".loopwarden/loopwarden.db in the working directory).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
LoopIdArgument = Annotated[
    str, typer.Argument(metavar="LOOP_ID", help="A loop id (a unique prefix is enough).")
]


def _emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def _fail(message: str, code: int = ExitCode.USAGE, *, as_json: bool = False) -> NoReturn:
    _print_error(message)
    if as_json:
        _emit_json({"error": _one_line(message), "exit_code": int(code)})
    raise typer.Exit(int(code))


@contextlib.contextmanager
def _errors(as_json: bool) -> Iterator[None]:
    """Turn loopwarden's errors into one line and an exit code."""
    try:
        yield
    except (LoopNotFoundError, SchemaVersionError, ConfigError, InvalidTransitionError) as exc:
        _fail(str(exc), ExitCode.USAGE, as_json=as_json)
    except LeaseHeldError as exc:
        _fail(str(exc), ExitCode.BUSY, as_json=as_json)
    except LoopwardenError as exc:
        _fail(str(exc), ExitCode.FAILED, as_json=as_json)


def _open(
    db: str | None, *, create: bool, as_json: bool, command_hooks: bool = False
) -> LoopEngine:
    """The engine on ``db``; a database that is missing, newer or unusable exits 2.

    With ``command_hooks`` the Stop / SubagentStop hooks of the settings files
    (~/.loopwarden/settings.json, .loopwarden/settings.json, .loopwarden/settings.local.json)
    are consulted whenever a loop it drives is about to complete.
    """
    try:
        engine = LoopEngine(db or None, create=create)
    except LoopwardenError as exc:
        _fail(str(exc), ExitCode.USAGE, as_json=as_json)
    if command_hooks:
        engine.stop_checkers.append(CommandHooks(engine=engine))
    return engine


def _resolve(engine: LoopEngine, loop_id: str) -> LoopSnapshot:
    """The loop with this id, or the one loop whose id starts with it."""
    try:
        return engine.get(loop_id)
    except LoopNotFoundError:
        if len(loop_id) < 4:
            raise
        matches = [s for s in engine.list() if s.id.startswith(loop_id)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            ids = ", ".join(s.id for s in matches[:5])
            raise ConfigError("LOOP_ID", f"{loop_id!r} matches several loops: {ids}") from None
        raise


def _console() -> Console:
    return Console(highlight=False, soft_wrap=False)


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _when(timestamp: float) -> str:
    local = datetime.fromtimestamp(timestamp).astimezone()
    return f"{local:%Y-%m-%d %H:%M:%S} ({_age(time.time() - timestamp)} ago)"


def _score(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


_STATE_STYLE = {
    State.COMPLETED: "green",
    State.BLOCKED: "yellow",
    State.ESCALATED: "red",
}


def _state_text(snapshot: LoopSnapshot) -> Text:
    label = snapshot.state.value
    if snapshot.terminal_reason and snapshot.terminal_reason.value != label:
        label += f" ({snapshot.terminal_reason.value})"
    return Text(label, style=_STATE_STYLE.get(snapshot.state, "cyan"))


_BLOCKS = " ▁▂▃▄▅▆▇█"


def sparkline(scores: Sequence[float]) -> str:
    """Scores 0..100 as one line of block characters."""
    out = []
    for s in scores:
        level = round(max(0.0, min(100.0, s)) / 100 * (len(_BLOCKS) - 1))
        out.append(_BLOCKS[max(1, level)])
    return "".join(out)


def score_chart(scores: Sequence[float], *, height: int = 8, width: int = 60) -> list[str]:
    """A column chart of scores 0..100, one column per iteration (the last ``width`` of them),
    with a 0/50/100 axis and iteration numbers underneath."""
    if not scores:
        return []
    shown = list(scores)[-width:]
    first = len(scores) - len(shown) + 1
    step = 100.0 / height
    lines = []
    for row in range(height, 0, -1):
        floor = (row - 1) * step
        cells = []
        for s in shown:
            fill = (max(0.0, min(100.0, s)) - floor) / step
            if fill >= 1:
                cells.append("█")
            elif fill <= 0:
                cells.append("·" if row == 1 else " ")
            else:
                cells.append(_BLOCKS[max(1, round(fill * 8))])
        label = {height: "100", (height + 1) // 2: " 50", 1: "  0"}.get(row, "   ")
        lines.append(f"{label} ┤" + " ".join(cells))
    lines.append("    └" + "─" * (2 * len(shown)))
    numbers = "".join(f"{(first + i) % 10} " for i in range(len(shown)))
    lines.append("     " + numbers.rstrip() + f"   (iteration, from {first})")
    return lines


# ----- reporting a run -----------------------------------------------------------------------


class _Plain:
    """Plain lines on stdout (not a terminal)."""

    def __enter__(self) -> _Plain:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __call__(self, event: RunEvent) -> None:
        for line in event_lines(event):
            sys.stdout.write(line + "\n")
        sys.stdout.flush()


class _Json:
    """One JSON object per line: started, one per iteration, finished."""

    def __enter__(self) -> _Json:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            s = event.snapshot
            _emit_json(
                {
                    "event": "started",
                    "loop_id": s.id,
                    "task_id": s.task_id,
                    "state": s.state.value,
                    "iteration": s.iteration,
                    "max_iterations": s.max_iterations,
                    "resumed": event.resumed,
                    "agent": event.agent,
                }
            )
        elif isinstance(event, IterationDone):
            _emit_json(event.to_dict())
        elif isinstance(event, RunFinished):
            _emit_json(event.outcome.to_dict())


_SIGNAL_STYLE = {"CONTINUE": "cyan", "COMPLETE": "green", "BLOCKED": "yellow", "ESCALATE": "red"}


class _LiveView:
    """A rich live view: the iterations so far and what is running now."""

    def __init__(self) -> None:
        self.console = _console()
        self.title = ""
        self.rows: list[IterationDone] = []
        self.now = ""
        self.since = time.monotonic()
        self.live = Live(
            get_renderable=self._render,
            console=self.console,
            refresh_per_second=8,
            transient=False,
        )

    def __enter__(self) -> _LiveView:
        self.live.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.now = ""
        self.live.__exit__(kind, exc, tb)

    def _render(self) -> RenderableType:
        table = Table(title=self.title or None, title_justify="left", expand=False)
        table.add_column("#", justify="right")
        table.add_column("agent", no_wrap=True)
        table.add_column("rules")
        table.add_column("score", justify="right")
        table.add_column("signal")
        table.add_column("reason", overflow="fold", max_width=60)
        for row in self.rows[-12:]:
            d = row.decision
            agent = row.agent.describe() if row.agent else "(resumed)"
            checks = Text()
            for r in row.report.results if row.report else ():
                mark, style = {
                    "passed": ("✓", "green"),
                    "failed": ("✗", "red"),
                    "errored": ("!", "yellow"),
                }[r.status.value]
                if checks:
                    checks.append("\n")
                checks.append(f"{mark} {r.name} {r.duration:.1f}s", style=style)
            table.add_row(
                f"{row.iteration}/{row.max_iterations}",
                agent,
                checks,
                _score(d.score),
                Text(d.signal.value, style=_SIGNAL_STYLE.get(d.signal.value, "")),
                d.reason,
            )
        parts: list[RenderableType] = [table]
        if self.now:
            elapsed = time.monotonic() - self.since
            parts.append(Spinner("dots", text=f"{self.now} · {elapsed:.1f}s"))
        return Group(*parts)

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            s = event.snapshot
            verb = "resuming" if event.resumed else "running"
            self.title = f"loopwarden · {verb} loop {s.id} · task {s.task_id} · agent {event.agent}"
        elif isinstance(event, AgentStarted):
            self.now = f"iteration {event.iteration}/{event.max_iterations}: agent running"
            self.since = time.monotonic()
        elif isinstance(event, AgentFinished):
            self.now = (
                f"iteration {event.iteration}/{event.max_iterations}: agent "
                f"{event.agent.describe()}; validating"
            )
            self.since = time.monotonic()
        elif isinstance(event, IterationDone):
            self.rows.append(event)
            self.now = ""
        elif isinstance(event, RunFinished):
            self.now = ""
            self.live.refresh()
            style = "green" if event.outcome.exit_code == ExitCode.COMPLETED else "yellow"
            for line in event_lines(event):
                self.console.print(Text(line, style=style))
            return
        self.live.refresh()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops a run the way Ctrl-C does (the loop is left resumable)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        raise Terminated

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _drive(
    engine: LoopEngine, loop_id: str, settings: RunSettings, *, as_json: bool, resumed: bool
) -> NoReturn:
    reporter: _Plain | _Json | _LiveView
    if as_json:
        reporter = _Json()
    elif sys.stdout.isatty():
        reporter = _LiveView()
    else:
        reporter = _Plain()
    runner = Runner(engine, settings, on_event=reporter)
    try:
        with _sigterm_as_interrupt(), reporter:
            outcome = runner.drive(loop_id, resumed=resumed)
    except LeaseHeldError as exc:
        engine.close()
        _fail(str(exc), ExitCode.BUSY, as_json=as_json)
    fire_completion_hooks(engine, outcome, settings, runner.log, _warn)
    engine.close()
    raise typer.Exit(int(outcome.exit_code))


# ----- run and resume ------------------------------------------------------------------------

_RULE_NAME = re.compile(r"^([A-Za-z][A-Za-z0-9_.:-]{0,63})=(.+)$")
_FLAG_OF_FIELD = {
    "max_iterations": "--max-iterations",
    "circuit_breaker_threshold": "--circuit-breaker",
    "regression_window": "--regression-window",
    "regression_min_drop": "--regression-min-drop",
    "completion": "--completion",
    "agent_timeout": "--agent-timeout",
    "hook_timeout": "--hook-timeout",
    "agent": "--agent",
}


def _validation_rules(
    commands: Sequence[str], *, timeout: float, shell: bool, workdir: str
) -> list[rules.Rule]:
    """``--validate [NAME=]CMD`` options as command rules (names made unique)."""
    out: list[rules.Rule] = []
    taken = {"agent"}
    for i, given in enumerate(commands, start=1):
        match = _RULE_NAME.match(given.strip())
        name, command = (match.group(1), match.group(2)) if match else (None, given.strip())
        if not command:
            _fail(f"--validate {given!r}: the command is empty")
        base = name or ("validate" if len(commands) == 1 else f"validate-{i}")
        name = base
        n = 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        taken.add(name)
        try:
            rule = rules.command(name, command, timeout=timeout, shell=shell)
        except (ConfigError, ValueError) as exc:
            _fail(f"--validate {given!r}: {exc}")
        if not shell:
            problem = _rule_missing(rule, workdir)
            if problem:
                _fail(f"--validate {given!r}: {problem}")
        out.append(rule)
    return out


def _rule_missing(rule: rules.Rule, workdir: str) -> str | None:
    """Why a command rule's executable cannot be run, or None."""
    if isinstance(rule, rules.CommandRule) and not isinstance(rule.argv, str):
        return process.missing_executable(list(rule.argv), workdir)
    return None


def _absolute_hook(command: str) -> str:
    """A hook given as a relative path keeps working from another directory (resume)."""
    try:
        words = process.split_command(command)
    except ValueError:
        return command
    if words and os.sep in words[0] and not os.path.isabs(words[0]):
        words[0] = os.path.abspath(words[0])
        return shlex.join(words)
    return command


def _config_error(exc: ConfigError) -> str:
    flag = _FLAG_OF_FIELD.get(exc.field)
    if flag is None and exc.field.startswith("rules"):
        flag = "--validate"
    return f"{flag or exc.field}: {exc.detail}"


@app.command()
def run(
    agent: Annotated[
        str,
        typer.Option(
            "--agent",
            "-a",
            metavar="CMD",
            help="The agent command line; it gets each iteration's prompt on stdin.",
        ),
    ],
    prompt: Annotated[
        str | None, typer.Option("--prompt", "-p", metavar="TEXT", help="The task prompt.")
    ] = None,
    prompt_file: Annotated[
        Path | None,
        typer.Option("--prompt-file", "-f", metavar="FILE", help="Read the prompt from FILE."),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option("--task", "-t", metavar="ID", help="Task id (default: the directory name)."),
    ] = None,
    max_iterations: Annotated[
        int, typer.Option("--max-iterations", "-n", metavar="N", help="Iteration budget.")
    ] = 15,
    validate: Annotated[
        list[str] | None,
        typer.Option(
            "--validate",
            "-V",
            metavar="[NAME=]CMD",
            help="A command that must exit 0 for the work to count (repeatable).",
        ),
    ] = None,
    completion_policy: Annotated[
        CompletionPolicy,
        typer.Option("--completion", help="When a completion claim ends the loop."),
    ] = CompletionPolicy.PROMISE_AND_RULES,
    circuit_breaker: Annotated[
        int,
        typer.Option("--circuit-breaker", metavar="N", help="Escalate after N failed in a row."),
    ] = 3,
    regression_window: Annotated[
        int, typer.Option("--regression-window", metavar="N", help="Scores watched for a fall.")
    ] = 3,
    regression_min_drop: Annotated[
        float,
        typer.Option("--regression-min-drop", metavar="POINTS", help="Fall that escalates."),
    ] = 10.0,
    on_complete: Annotated[
        list[str] | None,
        typer.Option(
            "--on-complete",
            metavar="SCRIPT",
            help="Run SCRIPT with the outcome as JSON on stdin when the run ends (repeatable; "
            "default: LOOPWARDEN_ON_COMPLETE, several separated by ':').",
        ),
    ] = None,
    webhook: Annotated[
        list[str] | None,
        typer.Option(
            "--webhook",
            metavar="URL",
            help="POST the outcome as JSON to URL when the run ends (repeatable; default: "
            "LOOPWARDEN_WEBHOOK).",
        ),
    ] = None,
    agent_timeout: Annotated[
        float, typer.Option("--agent-timeout", metavar="SECONDS", help="Per agent run.")
    ] = 1800.0,
    validate_timeout: Annotated[
        float, typer.Option("--validate-timeout", metavar="SECONDS", help="Per --validate run.")
    ] = 600.0,
    hook_timeout: Annotated[
        float,
        typer.Option(
            "--hook-timeout", metavar="SECONDS", help="Per completion hook script (then killed)."
        ),
    ] = 30.0,
    shell: Annotated[
        bool,
        typer.Option("--shell", help="Run --agent and --validate command lines through /bin/sh."),
    ] = False,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir",
            "-C",
            metavar="DIR",
            help="Where the agent and validation run (default: the current directory).",
        ),
    ] = None,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach", help="Queue the loop for `loopwarden worker` instead of running it here."
        ),
    ] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run an agent command in a durable loop until its work is verified or a guard stops it."""
    where = str((workdir or Path.cwd()).resolve())
    if not os.path.isdir(where):
        _fail(f"--workdir {where}: not a directory", as_json=as_json)
    if (prompt is None) == (prompt_file is None):
        _fail("give exactly one of --prompt TEXT or --prompt-file FILE", as_json=as_json)
    if prompt_file is not None:
        try:
            prompt = prompt_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            _fail(f"--prompt-file {prompt_file}: cannot read it ({exc})", as_json=as_json)
    assert prompt is not None
    if not prompt.strip():
        _fail("the prompt is empty", as_json=as_json)
    env_hooks = completion.scripts_from_env(os.environ.get("LOOPWARDEN_ON_COMPLETE"))
    scripts = [_absolute_hook(h) for h in (on_complete or env_hooks)]
    urls = list(webhook or os.environ.get("LOOPWARDEN_WEBHOOK", "").split())
    for url in urls:
        if not url.startswith(("http://", "https://")):
            _fail(f"--webhook {url!r}: must be an http:// or https:// URL", as_json=as_json)
    try:
        settings = RunSettings(
            agent=agent,
            workdir=where,
            agent_timeout=agent_timeout,
            shell=shell,
            on_complete=tuple(scripts),
            webhooks=tuple(urls),
            hook_timeout=hook_timeout,
        )
        problem = settings.missing()
        if problem:
            _fail(f"--agent: {problem}", as_json=as_json)
        if validate_timeout <= 0:
            raise ConfigError("--validate-timeout", f"must be > 0 seconds, got {validate_timeout}")
        checks = _validation_rules(
            validate or [], timeout=validate_timeout, shell=shell, workdir=where
        )
        config = LoopConfig(
            max_iterations=max_iterations,
            circuit_breaker_threshold=circuit_breaker,
            regression_window=regression_window,
            regression_min_drop=regression_min_drop,
            completion=completion_policy,
            rules=[agent_rule(), *checks],
            workdir=where,
        )
    except ConfigError as exc:
        _fail(_config_error(exc), as_json=as_json)
    engine = _open(db, create=True, as_json=as_json, command_hooks=True)
    with _errors(as_json):
        snapshot = engine.create(
            task or os.path.basename(where) or "task",
            config,
            prompt=prompt,
            metadata=settings.metadata(),
        )
    if detach:
        engine.close()
        if as_json:
            _emit_json({"event": "queued", "loop_id": snapshot.id, "task_id": snapshot.task_id})
        else:
            _console().print(
                f"queued loop {snapshot.id} (task {snapshot.task_id}); a `loopwarden worker` "
                f"on this database will drive it"
            )
        raise typer.Exit(0)
    _drive(engine, snapshot.id, settings, as_json=as_json, resumed=False)


@app.command()
def resume(loop_id: LoopIdArgument, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Continue a loop in this process with the agent command and options stored at `run`."""
    engine = _open(db, create=False, as_json=as_json, command_hooks=True)
    with _errors(as_json):
        snapshot = _resolve(engine, loop_id)
        settings = RunSettings.of(snapshot)
        if settings is None:
            _fail(
                f"loop {snapshot.id} was not started by `loopwarden run` (no agent command is "
                "stored with it); drive it through the Python API instead",
                as_json=as_json,
            )
        if not snapshot.terminal:
            problem = settings.missing()
            if problem:
                _fail(f"the stored agent command cannot run: {problem}", as_json=as_json)
    _drive(engine, snapshot.id, settings, as_json=as_json, resumed=True)


# ----- looking at loops ----------------------------------------------------------------------


def _summary(s: LoopSnapshot, now: float) -> dict[str, Any]:
    return {
        "id": s.id,
        "task_id": s.task_id,
        "state": s.state.value,
        "iteration": s.iteration,
        "max_iterations": s.max_iterations,
        "score": s.last_score,
        "terminal_reason": s.terminal_reason.value if s.terminal_reason else None,
        "reason": s.reason,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "age_seconds": round(now - s.created_at, 3),
    }


@app.command("list")
def list_loops(
    state: Annotated[
        State | None, typer.Option("--state", "-s", help="Only loops in this state.")
    ] = None,
    task: Annotated[
        str | None, typer.Option("--task", "-t", metavar="ID", help="Only this task's loops.")
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", metavar="N", help="At most N loops.", min=1)
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """List loops: id, task, state, iteration/max, last score, age."""
    engine = _open(db, create=False, as_json=as_json)
    with _errors(as_json):
        loops = engine.list(state=state, task_id=task, limit=limit)
    engine.close()
    now = time.time()
    if as_json:
        _emit_json([_summary(s, now) for s in loops])
        return
    console = _console()
    if not loops:
        console.print("no loops" + (" match" if state or task else " yet"))
        return
    table = Table()
    table.add_column("loop", no_wrap=True)
    table.add_column("task")
    table.add_column("state")
    table.add_column("iter", justify="right")
    table.add_column("score", justify="right")
    table.add_column("age", justify="right")
    for s in loops:
        table.add_row(
            s.id,
            s.task_id,
            _state_text(s),
            f"{s.iteration}/{s.max_iterations}",
            _score(s.last_score),
            _age(now - s.created_at),
        )
    console.print(table)


def _next_step(s: LoopSnapshot) -> str:
    if s.state is State.COMPLETED:
        return "nothing: the work is verified complete"
    if s.terminal:
        return f"loopwarden reopen {s.id} [--extra-iterations N], then loopwarden resume {s.id}"
    if RunSettings.of(s) is not None:
        return f"loopwarden resume {s.id}"
    return "continue it through the Python API (it was not started by `loopwarden run`)"


@app.command()
def status(loop_id: LoopIdArgument, db: DbOption = None, as_json: JsonOption = False) -> None:
    """One loop at a glance: state, iteration, score, last decision, what to do next."""
    engine = _open(db, create=False, as_json=as_json)
    with _errors(as_json):
        s = _resolve(engine, loop_id)
    engine.close()
    if as_json:
        data = s.to_dict()
        data["exit_code"] = int(exit_code_for(s)) if s.terminal else None
        _emit_json(data)
        return
    console = _console()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("loop", s.id)
    grid.add_row("task", s.task_id)
    grid.add_row("state", _state_text(s))
    grid.add_row("iteration", f"{s.iteration}/{s.max_iterations}")
    trend = sparkline(s.scores)
    grid.add_row("score", _score(s.last_score) + (f"  {trend}" if trend else ""))
    grid.add_row("failures in a row", str(s.consecutive_failures))
    d = s.last_decision
    if d is not None:
        grid.add_row("last decision", f"iteration {d.iteration}: {d.signal.value} — {d.reason}")
    if s.reason:
        grid.add_row("reason", s.reason)
    settings = None
    with contextlib.suppress(ConfigError):
        settings = RunSettings.of(s)
    if settings is not None:
        grid.add_row("agent", f"{settings.agent_name} (timeout {settings.agent_timeout:g}s)")
    grid.add_row("created", _when(s.created_at))
    grid.add_row("updated", _when(s.updated_at))
    grid.add_row("exit code", str(int(exit_code_for(s))) if s.terminal else "— (not finished)")
    grid.add_row("next", _next_step(s))
    console.print(grid)


@app.command()
def show(loop_id: LoopIdArgument, db: DbOption = None, as_json: JsonOption = False) -> None:
    """A loop's iteration history, its score trend as a chart, and how it ended."""
    engine = _open(db, create=False, as_json=as_json)
    with _errors(as_json):
        s = _resolve(engine, loop_id)
        records = engine.history(s.id)
    engine.close()
    if as_json:
        _emit_json({"loop": s.to_dict(), "iterations": [r.to_dict() for r in records]})
        return
    console = _console()
    console.print(
        Text.assemble(("loop ", "bold"), s.id, "  task ", s.task_id, "  ", _state_text(s))
    )
    table = Table()
    table.add_column("#", justify="right")
    table.add_column("rules")
    table.add_column("score", justify="right")
    table.add_column("signal")
    table.add_column("took", justify="right")
    table.add_column("reason", overflow="fold")
    for r in records:
        marks = Text()
        for res in r.report.results:
            style = {"passed": "green", "failed": "red", "errored": "yellow"}[res.status.value]
            marks.append(f"{res.name}:{res.status.value} ", style=style)
        table.add_row(
            str(r.iteration),
            marks,
            _score(r.score),
            Text(r.signal.value, style=_SIGNAL_STYLE.get(r.signal.value, "")),
            f"{r.decided_at - r.started_at:.1f}s",
            r.reason,
        )
    if records:
        console.print(table)
        console.print(Text("score trend", style="bold"))
        for line in score_chart([r.score for r in records]):
            console.print(Text(line))
    else:
        console.print("no iteration decided yet")
    if s.terminal:
        reason = s.terminal_reason.value if s.terminal_reason else s.state.value
        console.print(
            Text.assemble(
                ("ended: ", "bold"), (reason, _STATE_STYLE.get(s.state, "")), f" — {s.reason}"
            )
        )
    else:
        console.print(Text.assemble(("now: ", "bold"), f"{s.state.value}, iteration {s.iteration}"))


@app.command()
def block(
    loop_id: LoopIdArgument,
    reason: Annotated[
        str, typer.Option("--reason", "-r", metavar="TEXT", help="Why (kept with the loop).")
    ],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Block a live loop now (a human's override); a running `loopwarden run` stops with 4."""
    engine = _open(db, create=False, as_json=as_json)
    with _errors(as_json):
        s = engine.block(_resolve(engine, loop_id).id, reason)
    engine.close()
    if as_json:
        _emit_json(s.to_dict())
    else:
        _console().print(f"blocked loop {s.id}: {s.reason}")


@app.command()
def reopen(
    loop_id: LoopIdArgument,
    extra_iterations: Annotated[
        int,
        typer.Option("--extra-iterations", "-n", metavar="N", help="Add N iterations.", min=0),
    ] = 0,
    note: Annotated[
        str | None,
        typer.Option("--note", metavar="TEXT", help="Feedback for the next iteration."),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Move a blocked or escalated loop back to executing; then `loopwarden resume` it."""
    engine = _open(db, create=False, as_json=as_json)
    with _errors(as_json):
        s = engine.reopen(
            _resolve(engine, loop_id).id, extra_iterations=extra_iterations, note=note
        )
    engine.close()
    if as_json:
        _emit_json(s.to_dict())
    else:
        _console().print(
            f"reopened loop {s.id} at iteration {s.iteration}/{s.max_iterations}; "
            f"continue with: loopwarden resume {s.id}"
        )


class DiagramFormat(StrEnum):
    """Output formats of `loopwarden diagram`."""

    MERMAID = "mermaid"
    DOT = "dot"
    SVG = "svg"


@app.command()
def diagram(
    loop_id: Annotated[
        str | None,
        typer.Argument(
            metavar="LOOP_ID", help="Draw the path this loop took, with transition counts."
        ),
    ] = None,
    fmt: Annotated[
        DiagramFormat, typer.Option("--format", "-F", help="mermaid, dot or svg.")
    ] = DiagramFormat.MERMAID,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", metavar="FILE", help="Write to FILE.")
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """The state machine as Mermaid, Graphviz DOT or SVG; with a loop id, the path it took."""
    from loopwarden import diagrams

    counts: dict[tuple[str, str, str], int] | None = None
    resolved: str | None = None
    if loop_id is not None:
        engine = _open(db, create=False, as_json=as_json)
        with _errors(as_json):
            resolved = _resolve(engine, loop_id).id
            counts = diagrams.transition_counts(engine.checkpoints(resolved))
        engine.close()
    render = {
        DiagramFormat.MERMAID: diagrams.mermaid,
        DiagramFormat.DOT: diagrams.dot,
        DiagramFormat.SVG: diagrams.svg,
    }[fmt]
    text = render(counts)
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            _fail(f"--output {output}: {exc.strerror or exc}", as_json=as_json)
    if as_json:
        _emit_json(
            {
                "format": fmt.value,
                "loop_id": resolved,
                "counts": [
                    {"source": a, "trigger": t, "dest": b, "count": n}
                    for (a, t, b), n in sorted((counts or {}).items())
                ],
                "output": str(output) if output else None,
                "diagram": text,
            }
        )
    elif output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        _console().print(f"wrote {output}")


db_app = typer.Typer(help="The database schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Bring the database to this loopwarden's schema (also done on first use)."""
    from loopwarden.store.migrate import upgrade

    with _errors(as_json):
        result = upgrade(db)
    if as_json:
        _emit_json(result.to_dict())
    elif result.changed:
        _console().print(f"upgraded {result.url} from schema {result.before} to {result.after}")
    else:
        _console().print(f"{result.url} is at schema {result.after}; nothing to do")


@app.command()
def worker(
    db: DbOption = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", metavar="N", min=1, help="Loops at once.")
    ] = 1,
    lease_ttl: Annotated[
        float, typer.Option("--lease-ttl", metavar="SECONDS", min=1.0, help="Lease length.")
    ] = 30.0,
    poll: Annotated[
        float, typer.Option("--poll", metavar="SECONDS", min=0.05, help="Idle polling interval.")
    ] = 1.0,
    exit_when_idle: Annotated[
        bool, typer.Option("--exit-when-idle", help="Exit when no loop is runnable.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Claim runnable loops from the database and drive them (SIGTERM: finish the step, exit)."""
    from loopwarden.worker import run_worker

    with _errors(as_json):
        report = run_worker(
            db,
            concurrency=concurrency,
            lease_ttl=lease_ttl,
            poll_interval=poll,
            exit_when_idle=exit_when_idle,
        )
    if as_json:
        _emit_json(report.to_dict())
    else:
        _console().print(
            f"worker stopped: {report.loops_finished} loop(s) finished, {report.steps} step(s)"
        )


@app.command()
def mcp(
    db: DbOption = None,
    log_level: Annotated[
        str, typer.Option("--log-level", metavar="LEVEL", help="Log level (logs go to stderr).")
    ] = "info",
) -> None:
    """Serve the iteration and stop-hook tools over MCP on stdio (see docs/mcp.md)."""
    from loopwarden.integrations.mcp_server import serve

    serve(db, log_level=log_level)


# ----- the guard laboratory -----------------------------------------------------------------


@app.command()
def replay(
    loop_id: LoopIdArgument,
    max_iterations: Annotated[
        int | None, typer.Option("--max-iterations", metavar="N", min=1, help="Budget.")
    ] = None,
    circuit_breaker: Annotated[
        int | None,
        typer.Option("--circuit-breaker", metavar="N", min=1, help="Failures in a row."),
    ] = None,
    regression_window: Annotated[
        int | None, typer.Option("--regression-window", metavar="N", min=2)
    ] = None,
    regression_min_drop: Annotated[
        float | None, typer.Option("--regression-min-drop", metavar="POINTS", min=0)
    ] = None,
    completion: Annotated[
        str | None,
        typer.Option("--completion", metavar="POLICY", help="promise_and_rules, promise, rules."),
    ] = None,
    completion_promise: Annotated[
        list[str] | None,
        typer.Option("--completion-promise", metavar="WORD", help="Completion word(s)."),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Re-decide a recorded loop under other guard settings (nothing runs) and compare."""
    overrides: dict[str, Any] = {
        key: value
        for key, value in (
            ("max_iterations", max_iterations),
            ("circuit_breaker_threshold", circuit_breaker),
            ("regression_window", regression_window),
            ("regression_min_drop", regression_min_drop),
            ("completion", completion),
            ("completion_promises", completion_promise or None),
        )
        if value is not None
    }
    engine = _open(db, create=False, as_json=as_json)
    with _errors(as_json):
        result = engine.replay(_resolve(engine, loop_id).id, overrides)
    engine.close()
    if as_json:
        _emit_json(result.to_dict())
        return
    console = _console()
    table = Table(title=f"replay of {result.loop_id}", show_lines=False)
    for column in ("iter", "score", "recorded", "replayed", ""):
        table.add_column(column)
    for step in result.steps:
        recorded = step.original.signal.value
        if step.original.terminal_reason:
            recorded += f" ({step.original.terminal_reason.value})"
        replayed = step.replayed.signal.value
        if step.replayed.terminal_reason:
            replayed += f" ({step.replayed.terminal_reason.value})"
        table.add_row(
            str(step.iteration),
            _score(step.original.score),
            recorded,
            replayed,
            "≠" if step.differs else "",
        )
    console.print(table)
    console.print(result.summary())


@app.command()
def checkpoints(loop_id: LoopIdArgument, db: DbOption = None, as_json: JsonOption = False) -> None:
    """A loop's checkpoints: one per state it entered (seq, state, iteration, trigger, time)."""
    engine = _open(db, create=False, as_json=as_json)
    with _errors(as_json):
        found = engine.checkpoints(_resolve(engine, loop_id).id)
    engine.close()
    if as_json:
        _emit_json([{k: v for k, v in c.to_dict().items() if k != "data"} for c in found])
        return
    table = Table(title=f"checkpoints of {found[0].loop_id}" if found else "checkpoints")
    for column in ("seq", "state", "iteration", "trigger", "at"):
        table.add_column(column)
    for c in found:
        table.add_row(str(c.seq), c.state.value, str(c.iteration), c.trigger, _when(c.created_at))
    _console().print(table)


@app.command()
def fork(
    loop_id: LoopIdArgument,
    seq: Annotated[
        int | None,
        typer.Option("--seq", metavar="N", min=1, help="Checkpoint to fork from (default: last)."),
    ] = None,
    prompt: Annotated[
        str | None, typer.Option("--prompt", metavar="TEXT", help="A new base prompt.")
    ] = None,
    note: Annotated[
        str | None, typer.Option("--note", metavar="TEXT", help="Feedback for the next iteration.")
    ] = None,
    rewind_original: Annotated[
        bool, typer.Option("--rewind", help="Also block the original if it is still live.")
    ] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Start a new loop from any checkpoint of LOOP_ID (the original is kept)."""
    engine = _open(db, create=False, as_json=as_json)
    with _errors(as_json):
        original = _resolve(engine, loop_id).id
        if rewind_original:
            if seq is None:
                _fail("--rewind needs --seq: the checkpoint to rewind to", as_json=as_json)
            s = engine.rewind(original, seq, prompt=prompt, note=note)
        else:
            s = engine.fork(original, seq, prompt=prompt, note=note)
    engine.close()
    if as_json:
        _emit_json(s.to_dict())
    else:
        _console().print(
            f"forked loop {s.id} from {original} checkpoint {s.metadata['fork']['parent_seq']}: "
            f"{s.state.value}, iteration {s.iteration}; continue with: loopwarden resume {s.id}"
        )


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> float:
    """Seconds from an age like ``30d``, ``12h``, ``90m``, ``45s`` or a plain number of seconds."""
    text = text.strip().lower()
    unit = text[-1:] if text[-1:] in _AGE_UNITS else "s"
    number = text[:-1] if text[-1:] in _AGE_UNITS else text
    try:
        value = float(number)
    except ValueError:
        raise ConfigError(
            "--older-than", f"expected an age like 30d, 12h, 90m or 45s, got {text!r}"
        ) from None
    if value < 0:
        raise ConfigError("--older-than", f"must not be negative, got {text!r}")
    return value * _AGE_UNITS[unit]


@app.command()
def prune(
    older_than: Annotated[
        str, typer.Option("--older-than", metavar="AGE", help="e.g. 30d, 12h, 90m, 45s.")
    ],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete old checkpoints of finished loops, keeping their outcome and history summary."""
    with _errors(as_json):
        seconds = parse_age(older_than)
    engine = _open(db, create=False, as_json=as_json)
    with _errors(as_json):
        report = engine.prune(seconds)
    engine.close()
    if as_json:
        _emit_json(report)
    else:
        _console().print(
            f"pruned {len(report['loops'])} loop(s) finished before {_when(report['cutoff'])}: "
            f"{report['checkpoints_deleted']} checkpoint(s) deleted"
        )


def main(argv: Sequence[str] | None = None) -> None:
    """The ``loopwarden`` console script."""
    command = typer.main.get_command(app)
    command.main(args=list(argv) if argv is not None else None, prog_name=_PROG)


if __name__ == "__main__":
    main()
